import { rawCodec } from '../store/codec.js'
import { valueState } from '../store/state.js'

/**
 * The outbox: a state of the partition store, so that emitted records commit
 * in the batch of the state changes and the source position that produced
 * them, and snapshots carry what was not delivered yet. Key: outboxKey();
 * value: encodeOutboxRecord().
 */
export const OUTBOX_STATE = valueState<Uint8Array, 'bytes'>('tidemark.outbox', { codec: rawCodec(), keyType: 'bytes' })

/**
 * Dedupe watermarks: per upstream source partition (upstreamKey), the
 * highest [offset, index] applied, as [offset in base 10, index].
 */
export const DEDUPE_STATE = valueState<[string, number]>('tidemark.dedupe')

/** Names a user state may not take while outputs or dedupe are on. */
export const RESERVED_STATE_NAMES: readonly string[] = [OUTBOX_STATE.name, DEDUPE_STATE.name]
