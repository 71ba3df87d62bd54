import type { Readable } from 'node:stream'
import { Slots } from '../util/index.js'

/**
 * How many transfers of one direction a snapshot store runs at once, shared
 * by every snapshotter and restore that uses the store instance. A process
 * serving many partitions shares one store, so its uploads and downloads
 * stay bounded by the store's limits instead of growing with the partitions
 * (16 restores at 6 downloads each were 96 connections and their buffers).
 *
 * Slots go to waiters first come, first served: a release hands its slot
 * straight to the oldest waiter, so a burst of new requests cannot overtake
 * one that waits. Uploads and downloads have a limiter each, so a put that
 * reads its body from a get of the same store (a copy) never waits for a
 * slot that its own source holds.
 */
export class TransferLimiter extends Slots {}

/**
 * Gives the slot back when the stream closes: consumed to its end, failed,
 * or destroyed by its reader. A body that is neither read nor destroyed
 * keeps its slot, as it keeps its connection or file handle.
 */
export function releaseOnClose(stream: Readable, release: () => void): Readable {
  if (stream.closed || stream.destroyed) release()
  else stream.once('close', release)
  return stream
}

/** Validates a store's limit option: an integer from 1 to 1024. */
export function checkTransferLimit(value: unknown, name: string): number {
  if (typeof value !== 'number') throw new TypeError(`${name} must be a number, got ${typeof value}`)
  if (!Number.isInteger(value) || value < 1 || value > 1024) throw new RangeError(`${name} (${value}) must be an integer from 1 to 1024`)
  return value
}

/**
 * The default of both limits, for every store: measured with `npm run bench
 * -- partitions` (16 partitions snapshotting and restoring at once on
 * radosgw), where it keeps uploads and downloads at the speed of raw
 * requests at that concurrency.
 */
export const DEFAULT_TRANSFER_LIMIT = 16
