/**
 * The demo's event stream: deterministic, so that the verifier can rebuild it
 * without touching anything the worker used.
 */
export const KEYS = 50_000

export interface DemoEvent {
  key: string
  amount: number
}

export function demoEvent(i: number): DemoEvent {
  // A small LCG on the index: cheap, deterministic, spread over the keys.
  const h = Math.imul(i ^ 0x5bd1e995, 2654435761) >>> 0
  return { key: `user-${(h % KEYS).toString().padStart(4, '0')}`, amount: (h >>> 12) % 100 }
}
