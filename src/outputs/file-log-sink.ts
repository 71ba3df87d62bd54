import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { openFileLog, type FileLog, type FileLogOptions } from '../log/file-log/index.js'
import { outboxRecordBytes } from './record.js'
import type { EncodedRecords, OutboxRecord, OutputSink } from './types.js'

export interface FileLogSinkOptions {
  /** Each output topic is a file log at `<dir>/<topic>`. */
  dir: string
  fileLog?: FileLogOptions
}

const TOPIC = /^[A-Za-z0-9._-]+$/
/** A topic names a directory: at most a file name's 255 bytes. */
const MAX_TOPIC_LENGTH = 255

/** Throws a RangeError naming the topic unless it can be a log directory under the sink's dir. */
function validateTopic(topic: string): void {
  if (typeof topic !== 'string' || !TOPIC.test(topic) || topic === '.' || topic === '..' || topic.length > MAX_TOPIC_LENGTH) {
    throw new RangeError(`fileLogSink: topic ${JSON.stringify(typeof topic === 'string' && topic.length > 100 ? `${topic.slice(0, 100)}...` : topic)} must be 1 to ${MAX_TOPIC_LENGTH} letters, digits, '.', '_' or '-', and not '.' or '..' (it names a directory)`)
  }
}

/**
 * An output sink on the embedded file log, for jobs without Kafka: each
 * topic is one file log (one partition), each entry an output record in its
 * binary form (encodeOutboxRecord; read it with outboxRecordCodec()). Share
 * one sink between the partitions of a process: it opens each log once.
 */
export function fileLogSink(options: FileLogSinkOptions): OutputSink {
  if (options === null || typeof options !== 'object' || typeof options.dir !== 'string' || options.dir === '') throw new TypeError('fileLogSink: options.dir must be a non-empty string')
  const logs = new Map<string, Promise<FileLog>>()
  let closed = false
  const open = (topic: string): Promise<FileLog> => {
    validateTopic(topic)
    let log = logs.get(topic)
    if (log === undefined) {
      log = mkdir(options.dir, { recursive: true }).then(() => openFileLog(join(options.dir, topic), options.fileLog))
      log.catch(() => logs.delete(topic))
      logs.set(topic, log)
    }
    return log
  }
  // Appends of one partition's records are in order; appends of several
  // partitions sharing the sink interleave, each in its own order.
  const append = async (count: number, topicOf: (i: number) => string, bytesOf: (i: number) => Uint8Array): Promise<void> => {
    if (closed) throw new Error('the file-log sink is closed')
    // Opened first, then appended together: the file log commits appends
    // made together as one group (one write, one flush), in call order.
    const byTopic = new Map<string, Uint8Array[]>()
    for (let i = 0; i < count; i++) {
      const topic = topicOf(i)
      let entries = byTopic.get(topic)
      if (entries === undefined) byTopic.set(topic, (entries = []))
      entries.push(bytesOf(i))
    }
    const opened: Array<[FileLog, Uint8Array[]]> = []
    for (const [topic, entries] of byTopic) opened.push([await open(topic), entries])
    await Promise.all(opened.map(([log, entries]) => log.appendAll(entries)))
  }
  return {
    name: `file-log:${options.dir}`,
    validateTopic,
    send(records: readonly OutboxRecord[]): Promise<void> {
      // A record read from the outbox is appended as the bytes it was read from.
      return append(records.length, (i) => records[i]!.topic, (i) => outboxRecordBytes(records[i]!))
    },
    // The publisher's path: the outbox's bytes are the entries, nothing decoded.
    sendEncoded(records: EncodedRecords): Promise<void> {
      return append(records.length, (i) => records.topic(i), (i) => records.bytes(i))
    },
    async close(): Promise<void> {
      closed = true
      const all = await Promise.allSettled([...logs.values()])
      logs.clear()
      await Promise.all(all.map((r) => (r.status === 'fulfilled' ? r.value.close() : undefined)))
    },
  }
}
