/**
 * The demo's event stream: deterministic, so that the verifier can rebuild it
 * without touching anything the worker used.
 */
export const KEYS = 50_000

export interface DemoEvent {
  key: string
  amount: number
}

/** Keys an event may touch at one time: a window that moves across the key space as the stream goes on. */
const ACTIVE_KEYS = 2_000

export function demoEvent(i: number): DemoEvent {
  // A small LCG on the index: cheap and deterministic. The keys have
  // locality, as users active at the same time do: each event falls in a
  // window of ACTIVE_KEYS that moves one key per 4 events, so LevelDB leaves
  // the tables of quiet key ranges alone and snapshots can share them.
  const h = Math.imul(i ^ 0x5bd1e995, 2654435761) >>> 0
  const key = (Math.floor(i / 4) + (h % ACTIVE_KEYS)) % KEYS
  return { key: `user-${key.toString().padStart(5, '0')}`, amount: (h >>> 12) % 100 }
}
