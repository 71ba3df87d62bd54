import { rawCodec } from '../store/codec.js'
import { uncachedState, valueState } from '../store/state.js'

/**
 * The outbox: a state of the partition store, so that emitted records commit
 * in the batch of the state changes and the source position that produced
 * them, and snapshots carry what was not delivered yet. Key: outboxKey();
 * value: encodeOutboxRecord(). Uncached: each key is written once and deleted
 * after delivery, and a cache entry per delete pushed the job's hot keys out.
 */
export const OUTBOX_STATE = uncachedState(valueState<Uint8Array, 'bytes'>('tidemark.outbox', { codec: rawCodec(), keyType: 'bytes' }))

/**
 * Dedupe watermarks: per upstream source partition (upstreamKey), the
 * highest [offset, index] applied, as [offset in base 10, index].
 * Uncached: its values are arrays, which the cache never keeps, so a lookup
 * there per event would only miss.
 */
export const DEDUPE_STATE = uncachedState(valueState<[string, number]>('tidemark.dedupe'))

/** Names a user state may not take while outputs or dedupe are on. */
export const RESERVED_STATE_NAMES: readonly string[] = [OUTBOX_STATE.name, DEDUPE_STATE.name]
