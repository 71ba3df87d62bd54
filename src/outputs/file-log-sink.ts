import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { openFileLog, type FileLog, type FileLogOptions } from '../log/file-log.js'
import { outboxRecordBytes } from './record.js'
import type { OutboxRecord, OutputSink } from './types.js'

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
  return {
    name: `file-log:${options.dir}`,
    validateTopic,
    async send(records: readonly OutboxRecord[]): Promise<void> {
      if (closed) throw new Error('the file-log sink is closed')
      // Opened first, then appended together: the file log commits appends
      // made together as one group (one write, one flush), in call order.
      const byTopic = new Map<string, Uint8Array[]>()
      for (const r of records) {
        let entries = byTopic.get(r.topic)
        if (entries === undefined) byTopic.set(r.topic, (entries = []))
        // A record read from the outbox is appended as the bytes it was read from.
        entries.push(outboxRecordBytes(r))
      }
      const logs: Array<[FileLog, Uint8Array[]]> = []
      for (const [topic, entries] of byTopic) logs.push([await open(topic), entries])
      await Promise.all(logs.map(([log, entries]) => log.appendAll(entries)))
    },
    async close(): Promise<void> {
      closed = true
      const all = await Promise.allSettled([...logs.values()])
      logs.clear()
      await Promise.all(all.map((r) => (r.status === 'fulfilled' ? r.value.close() : undefined)))
    },
  }
}
