import type { Position } from '../store/position.js'

/**
 * What was committed since a partition's last snapshot, which a new one
 * would cover ('nothing': that snapshot covers the store), for the
 * hand-off's and close's skip. Before the owner committed a snapshot of its
 * own, the last one is the snapshot its start restored (or compared the
 * local store with): what the store held beyond it at the start
 * (`leadAtStart`, one event per offset, an upper bound) counts too, since
 * the next owner replays that as well. Undefined while a snapshot is in
 * flight, or when that lead is unknown (the start reset the store, or had no
 * snapshot to go by).
 */
export function sinceSnapshot(
  scheduler: { readonly inFlight: boolean; readonly pending: { events: number; bytes: number } },
  ownSnapshot: boolean,
  leadAtStart: number | undefined,
): { events: number; bytes: number } | 'nothing' | undefined {
  if (scheduler.inFlight) return undefined
  const lead = ownSnapshot ? 0 : leadAtStart
  if (lead === undefined) return undefined
  const { pending } = scheduler
  const events = pending.events + lead
  return events === 0 && pending.bytes === 0 ? 'nothing' : { events, bytes: pending.bytes }
}

/** Offsets the store's position is past `snapshot`'s for the partition; undefined when either is missing or the store is behind it. */
export function leadOver(snapshot: readonly Position[] | undefined, position: bigint | undefined, tp: { topic: string; partition: number }): number | undefined {
  const at = snapshot?.find((p) => p.topic === tp.topic && p.partition === tp.partition)?.offset
  if (at === undefined || position === undefined || position < at) return undefined
  return Number(position - at)
}
