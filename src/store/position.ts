import { TidemarkError } from '../errors.js'
import { describeValue } from '../util/describe-value.js'
import { positionKey } from './keys.js'
/**
 * A source position: the offset of the last event whose effects are in the
 * store, per source partition. Offsets are bigint because Kafka offsets are
 * 64-bit and exceed Number.MAX_SAFE_INTEGER.
 */
export interface Position {
  readonly topic: string
  readonly partition: number
  readonly offset: bigint
}

export const MAX_OFFSET = (1n << 63n) - 1n
const MAX_TOPIC_BYTES = 1024

export function validatePosition(position: unknown, argument = 'position'): Position {
  checkObject(position, argument)
  const { topic, partition, offset } = position as Record<string, unknown>
  if (typeof topic !== 'string' || topic.length === 0 || Buffer.byteLength(topic) > MAX_TOPIC_BYTES) {
    throw new TypeError(`${argument}.topic must be a non-empty string of at most ${MAX_TOPIC_BYTES} bytes, got ${JSON.stringify(topic)}`)
  }
  if (typeof partition !== 'number' || !Number.isInteger(partition) || partition < 0 || partition > 0xffffffff) {
    throw new RangeError(`${argument}.partition must be an integer from 0 to 2^32-1, got ${String(partition)}`)
  }
  if (typeof offset !== 'bigint') {
    throw new TypeError(`${argument}.offset must be a bigint (offsets are 64-bit), got ${typeof offset} ${String(offset)}`)
  }
  if (offset < 0n || offset > MAX_OFFSET) {
    throw new RangeError(`${argument}.offset must be from 0 to 2^63-1, got ${offset}`)
  }
  return { topic, partition, offset }
}

function checkObject(position: unknown, argument: string): void {
  if (position === null || typeof position !== 'object') {
    throw new TypeError(`${argument} must be { topic, partition, offset }, got ${describeValue(position)}`)
  }
}

/** Identifies a source partition inside maps. */
export function sourceId(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`
}

/** topic/partition@offset; only the shape is checked, so that a message may name a position that validatePosition() refuses. */
export function formatPosition(p: Position): string {
  checkObject(p, 'position')
  return `${p.topic}/${p.partition}@${p.offset}`
}

/** A commit's positions, each checked, and no source partition twice. */
export function checkCommitPositions(positions: Position[]): Position[] {
  const checked = positions.map((p, i) => validatePosition(p, positions.length === 1 ? 'position' : `position[${i}]`))
  const seen = new Set<string>()
  for (const p of checked) {
    const id = sourceId(p.topic, p.partition)
    if (seen.has(id)) throw new RangeError(`position lists ${p.topic}/${p.partition} twice`)
    seen.add(id)
  }
  return checked
}

/** Refuses a commit whose position is not after the stored one for its source partition (by sourceId). */
export function checkAdvancing(checked: Position[], stored: ReadonlyMap<string, Position>): void {
  for (const p of checked) {
    const before = stored.get(sourceId(p.topic, p.partition))
    if (before !== undefined && p.offset <= before.offset) {
      throw new TidemarkError(
        'TIDEMARK_POSITION_NOT_ADVANCING',
        `commit at ${formatPosition(p)} is not after the stored position ${formatPosition(before)}; the events up to it are already in the store (pass { allowRewind: true } to rewind on purpose)`,
        { details: { topic: p.topic, partition: p.partition, offset: p.offset, storedOffset: before.offset } },
      )
    }
  }
}

/** Position keys by source, made once each: LevelDB copies a key into a batch, so one Buffer serves every commit. */
export class PositionKeys {
  readonly #keys = new Map<string, Buffer>()

  of(p: Position): Buffer {
    const id = sourceId(p.topic, p.partition)
    let key = this.#keys.get(id)
    if (key === undefined) {
      key = positionKey(p.topic, p.partition)
      this.#keys.set(id, key)
    }
    return key
  }
}
