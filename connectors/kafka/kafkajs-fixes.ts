/**
 * Three changes of kafkajs 2.2.4, the last kafkajs release, applied when
 * tidemark/kafka is loaded. The first two replace one method of one kafkajs
 * class on its prototype, the third two modules' functions: process-wide
 * changes (the only ones Tidemark makes, which also apply to the program's
 * own kafkajs clients), because the objects are created deep inside
 * kafkajs's consumers, connections and produce requests. Any other kafkajs
 * version is left alone, and so is a kafkajs whose classes do not have the
 * methods these replace.
 *
 * 1. RequestQueue.scheduleCheckPendingRequests (src/network/requestQueue).
 *    kafkajs re-arms its throttle-check timer every time the check runs,
 *    also when nothing waits to be sent: with nothing throttled the delay
 *    is `throttledUntil - Date.now()` (about -1.8e12, which Node turns into
 *    1 ms), so every connection runs a 1 ms timer loop for its lifetime. An
 *    idle consumer of 32 partitions spent 5-7 % of a core in it (epoll woke
 *    ~1,700 times a second; `npm run bench -- idle`), and Node 24 prints a
 *    TimeoutNegativeWarning for it on the stderr of every program (kafkajs
 *    issues #1556, #1704, #1751; PRs #1667 and #1768, unreleased). The
 *    replacement is the same code, except that with no pending request it
 *    arms nothing: the timer's only job is to send queued requests once a
 *    throttle ends, and push() arms it again when it queues one (fulfilled
 *    and timed-out requests run the check directly). With requests pending
 *    the delays are kafkajs's own: the throttle's end, or 10 ms.
 *
 * 2. ConsumerGroup.fetch and ConsumerGroup.resume (src/consumer).
 *    When every partition a broker leads for this member is paused, fetch
 *    sleeps the whole fetch wait (`maxWaitTimeInMs`) and returns nothing;
 *    a resume() during that sleep is seen only after it. That is the state
 *    of a member whose new partitions are all being restored (they stay
 *    paused until their state is there), so the first records after a
 *    restore came up to a fetch wait late (100-230 ms of a 1.3 s hand-off
 *    at 250 ms in `npm run bench -- rebalance`; seconds at kafkajs's
 *    default 5000). The replacement does what the original does before it
 *    finds nothing to fetch (refresh the metadata if needed, check that the
 *    assignment is not stale, apply pending seeks, with the original's
 *    error handling), then the same sleep, which a resume() of that
 *    consumer group ends at once. When any partition on the broker is
 *    active it calls the original.
 *
 * 3. The record header encoder (src/protocol/recordBatch/header/v0), the
 *    same bytes for less work. kafkajs encodes each header of each produced
 *    record into an Encoder of its own: a zero-filled 512-byte buffer
 *    allocated for a few bytes, and an array and a Buffer per varint. Every
 *    record an output sink sends carries its `tidemark-id` header, and that
 *    encoding cost as much CPU as the rest of the record's encoding (3.7 of
 *    the 7 µs per event by which the outbox job trailed a direct producer
 *    in `npm run bench -- outputs`). The replacement writes a header with a
 *    string name and a Buffer or string value into one pooled buffer of its
 *    exact size (the name's bytes kept for the few names seen); any other
 *    header goes to the original. It is installed before kafkajs loads its
 *    record encoder (which keeps the header encoder it finds then), that is
 *    unless the program produced with kafkajs before it loaded
 *    tidemark/kafka, which then keeps the original.
 *    The record encoder (src/protocol/recordBatch/record/v0) is replaced
 *    the same way for records with headers: kafkajs makes per record an
 *    array of its header names, an array and an object per header, the
 *    array of their encoders, and copies each encoder's bytes into the
 *    record's: with the change above, a record with a `tidemark-id` header
 *    still cost 0.8 µs more to encode into a produce request than one
 *    without (0.3 µs with this one), and the direct producer of `npm run
 *    bench -- outputs` sending that header spent 3 µs more CPU per event
 *    than the same producer without it (0.4 µs with this one).
 *    The replacement makes the same calls as kafkajs for the record's
 *    fields and writes its headers straight into the record's buffer. A
 *    record without headers (what a plain producer sends), or with a header
 *    that is not one string or Buffer, goes to kafkajs's own encoder.
 */
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)

/** kafkajs's modules, when it is kafkajs 2.2.4; else undefined. */
export function kafkajs224<T>(path: string): T | undefined {
  try {
    if ((require('kafkajs/package.json') as { version: string }).version !== '2.2.4') return undefined
    return require(path) as T
  } catch {
    return undefined
  }
}

interface RequestQueue {
  throttledUntil: number
  pending: unknown[]
  throttleCheckTimeoutId: ReturnType<typeof setTimeout> | null
  checkPendingRequests(): void
  scheduleCheckPendingRequests(): void
}

/** kafkajs's own constant (src/network/requestQueue/index.js). */
const CHECK_PENDING_REQUESTS_INTERVAL = 10

function fixRequestQueue(): void {
  const proto = kafkajs224<{ prototype: Partial<RequestQueue> }>('kafkajs/src/network/requestQueue/index.js')?.prototype
  if (proto === undefined || typeof proto.scheduleCheckPendingRequests !== 'function') return
  proto.scheduleCheckPendingRequests = function scheduleCheckPendingRequests(this: RequestQueue): void {
    if (this.throttleCheckTimeoutId || this.pending.length === 0) return
    const untilUnthrottled = this.throttledUntil - Date.now()
    this.throttleCheckTimeoutId = setTimeout(() => {
      this.throttleCheckTimeoutId = null
      this.checkPendingRequests()
    }, untilUnthrottled > 0 ? untilUnthrottled : CHECK_PENDING_REQUESTS_INTERVAL)
  }
}

interface TopicPartitions { topic: string; partitions: number[] }

interface ConsumerGroup {
  maxWaitTime: number
  cluster: { refreshMetadataIfNecessary(): Promise<void> }
  subscriptionState: { active(): TopicPartitions[]; assigned(): TopicPartitions[] }
  filterPartitionsByNode(nodeId: number, topicPartitions: TopicPartitions[]): TopicPartitions[]
  checkForStaleAssignment(): void
  seekOffsets(topicPartitions: TopicPartitions[]): Promise<void>
  recoverFromFetch(error: unknown): Promise<void>
  fetch(nodeId: number): Promise<unknown[]>
  resume(topicPartitions: unknown): void
}

/** Per consumer group, the wake-ups of its fetches sleeping with every partition paused. */
const sleepers = new WeakMap<ConsumerGroup, Set<() => void>>()

/** True when `group` has an unpaused partition led by `nodeId`, or when that cannot be told (the original then decides). */
function fetchesFrom(group: ConsumerGroup, nodeId: number): boolean {
  try {
    return group.filterPartitionsByNode(nodeId, group.subscriptionState.active()).some((t) => t.partitions.length > 0)
  } catch {
    return true
  }
}

function fixPausedFetch(): void {
  const proto = kafkajs224<{ prototype: Partial<ConsumerGroup> }>('kafkajs/src/consumer/consumerGroup.js')?.prototype
  if (proto === undefined || typeof proto.fetch !== 'function' || typeof proto.resume !== 'function') return
  const fetch = proto.fetch
  const resume = proto.resume
  proto.fetch = async function fetchUnlessAllPaused(this: ConsumerGroup, nodeId: number): Promise<unknown[]> {
    if (fetchesFrom(this, nodeId)) return fetch.call(this, nodeId)
    try {
      // The original's steps before it looks for something to fetch.
      await this.cluster.refreshMetadataIfNecessary()
      this.checkForStaleAssignment()
      await this.seekOffsets(this.filterPartitionsByNode(nodeId, this.subscriptionState.assigned()))
    } catch (err) {
      await this.recoverFromFetch(err)
      return []
    }
    if (fetchesFrom(this, nodeId)) return fetch.call(this, nodeId)
    const wakes = sleepers.get(this) ?? new Set()
    sleepers.set(this, wakes)
    await new Promise<void>((resolve) => {
      const wake = (): void => {
        clearTimeout(timer)
        wakes.delete(wake)
        resolve()
      }
      const timer = setTimeout(wake, this.maxWaitTime)
      wakes.add(wake)
    })
    return []
  }
  proto.resume = function resumeAndWake(this: ConsumerGroup, topicPartitions: unknown): void {
    resume.call(this, topicPartitions)
    const wakes = sleepers.get(this)
    if (wakes !== undefined) for (const wake of [...wakes]) wake()
  }
}

interface HeaderEncoder { buf: Buffer; offset: number }
type EncodeHeader = (header: { key: unknown; value: unknown }) => HeaderEncoder

/** kafkajs's own path for its header encoder, as its record encoder requires it. */
const HEADER_MODULE = 'kafkajs/src/protocol/recordBatch/header/v0/index.js'
const RECORD_MODULE = 'kafkajs/src/protocol/recordBatch/record/v0/index.js'
/** Header names whose encoded form is kept: a program uses few. */
const MAX_KEPT_NAMES = 64

/** kafkajs's writeVarInt (zigzag, then 7 bits a byte), its 32-bit arithmetic included. */
function varIntSize(n: number): number {
  let z = (n << 1) ^ (n >> 31)
  let size = 1
  while ((z & 0xffffff80) !== 0) { z >>>= 7; size++ }
  return size
}

function writeVarInt(b: Buffer, at: number, n: number): number {
  let z = (n << 1) ^ (n >> 31)
  while ((z & 0xffffff80) !== 0) {
    b[at++] = (z & 0x7f) | 0x80
    z >>>= 7
  }
  b[at++] = z & 0x7f
  return at
}

const names = new Map<string, Buffer>()

/** A header name as kafkajs writes it (varint length, UTF-8), kept for the few names a program uses. */
function nameBytes(name: string): Buffer {
  let b = names.get(name)
  if (b === undefined) {
    const n = Buffer.byteLength(name, 'utf8')
    b = Buffer.allocUnsafeSlow(varIntSize(n) + n)
    b.write(name, writeVarInt(b, 0, n), 'utf8')
    if (names.size < MAX_KEPT_NAMES) names.set(name, b)
  }
  return b
}

/** `header` as kafkajs's header encoder writes it, or undefined where that is not kafkajs 2.2.4's or the record encoder already holds it. */
function fastHeaderEncoder(): EncodeHeader | undefined {
  const encoderClass = kafkajs224<{ prototype: HeaderEncoder }>('kafkajs/src/protocol/encoder.js')
  const original = kafkajs224<EncodeHeader>(HEADER_MODULE)
  if (encoderClass === undefined || typeof original !== 'function') return undefined
  const proto = encoderClass.prototype
  return function encodeHeader(header) {
    const { key, value } = header
    const isBuffer = Buffer.isBuffer(value)
    if (typeof key !== 'string' || (!isBuffer && typeof value !== 'string')) return original(header)
    const name = nameBytes(key)
    const n = isBuffer ? value.length : Buffer.byteLength(value, 'utf8')
    const out = Buffer.allocUnsafe(name.length + varIntSize(n) + n)
    name.copy(out, 0)
    const at = writeVarInt(out, name.length, n)
    if (isBuffer) value.copy(out, at)
    else out.write(value, at, 'utf8')
    // An Encoder (the record encoder only reads its bytes), without the
    // constructor's 512-byte buffer.
    const encoder = Object.create(proto) as HeaderEncoder
    encoder.buf = out
    encoder.offset = out.length
    return encoder
  }
}

function fixHeaderEncoder(): void {
  const encode = fastHeaderEncoder()
  if (encode === undefined) return
  const cache = require.cache
  const header = cache[require.resolve(HEADER_MODULE)]
  // The record encoder took the header encoder when it loaded: too late.
  if (header === undefined || cache[require.resolve(RECORD_MODULE)] !== undefined) return
  header.exports = encode
}

/** kafkajs's Encoder, as far as the record encoder uses it. */
interface RecordEncoder extends HeaderEncoder {
  ensureAvailable(n: number): void
  writeVarInt(n: number): RecordEncoder
  writeInt8(n: number): RecordEncoder
  writeVarLong(n: unknown): RecordEncoder
  writeVarIntBytes(v: unknown): RecordEncoder
}
interface RecordEncoderClass {
  new (): RecordEncoder
  sizeOfVarInt(n: number): number
  sizeOfVarLong(n: unknown): number
  sizeOfVarIntBytes(v: unknown): number
}
interface RecordFields { offsetDelta?: number; timestampDelta?: unknown; key?: unknown; value?: unknown; headers?: unknown }
type EncodeRecord = (record: RecordFields) => RecordEncoder

const PRODUCE_V3_MODULE = 'kafkajs/src/protocol/requests/produce/v3/request.js'

/**
 * A record as kafkajs's record encoder writes it: a record without headers,
 * or with a header that is not one string or Buffer, by that encoder
 * itself; otherwise its fields with kafkajs's own calls, in the same order,
 * and its headers written straight into the record's encoder.
 */
function fastRecordEncoder(original: EncodeRecord): EncodeRecord | undefined {
  const Encoder = kafkajs224<RecordEncoderClass>('kafkajs/src/protocol/encoder.js')
  if (typeof Encoder !== 'function' || typeof Encoder.sizeOfVarLong !== 'function') return undefined
  return function encodeRecord(record) {
    const headers = record.headers as Record<string, unknown> | null | undefined
    if (headers === undefined || headers === null || typeof headers !== 'object') return original(record)
    const keys = Object.keys(headers)
    if (keys.length === 0) return original(record)
    let headersSize = varIntSize(keys.length)
    for (const name of keys) {
      const v = headers[name]
      const n = Buffer.isBuffer(v) ? v.length : typeof v === 'string' ? Buffer.byteLength(v, 'utf8') : -1
      // An array (several values under one name), a null, a typed array...: kafkajs's own rules.
      if (n < 0) return original(record)
      headersSize += nameBytes(name).length + varIntSize(n) + n
    }
    const { offsetDelta = 0, timestampDelta = 0, key, value } = record
    const sizeOfBody = 1 + Encoder.sizeOfVarLong(timestampDelta) + Encoder.sizeOfVarInt(offsetDelta) + Encoder.sizeOfVarIntBytes(key) + Encoder.sizeOfVarIntBytes(value) + headersSize
    const encoder = new Encoder()
      .writeVarInt(sizeOfBody)
      .writeInt8(0)
      .writeVarLong(timestampDelta)
      .writeVarInt(offsetDelta)
      .writeVarIntBytes(key)
      .writeVarIntBytes(value)
    encoder.ensureAvailable(headersSize)
    const b = encoder.buf
    let at = writeVarInt(b, encoder.offset, keys.length)
    for (const name of keys) {
      const v = headers[name] as Buffer | string
      at += nameBytes(name).copy(b, at)
      if (typeof v === 'string') {
        const n = Buffer.byteLength(v, 'utf8')
        at = writeVarInt(b, at, n)
        at += b.write(v, at, n, 'utf8')
      } else {
        at = writeVarInt(b, at, v.length)
        at += v.copy(b, at)
      }
    }
    encoder.offset = at
    return encoder
  }
}

function fixRecordEncoder(): void {
  const original = kafkajs224<EncodeRecord>(RECORD_MODULE)
  if (typeof original !== 'function' || original.name === 'encodeRecord') return
  const cache = require.cache
  // The produce request took the record encoder when it loaded: too late.
  if (cache[require.resolve(PRODUCE_V3_MODULE)] !== undefined) return
  const encode = fastRecordEncoder(original)
  const record = cache[require.resolve(RECORD_MODULE)]
  if (encode === undefined || record === undefined) return
  record.exports = encode
}

fixRequestQueue()
fixPausedFetch()
// In this order: the record encoder loads (with the header encoder it finds) when its fix takes it.
fixHeaderEncoder()
fixRecordEncoder()
