// The two stages' logic, shared by the Kafka and the embedded runs.
import { valueState, type EmitContext, type Transaction } from 'tidemark'

export const WORDS = ['tide', 'mark', 'state', 'log', 'kafka', 'snapshot', 'partition', 'offset', 'group', 'owner']

/** Stage 1's state: words counted so far. Stage 2's: the sums of the deltas it received. */
export const counts = valueState<number>('counts')

/** A change of one word's count, as stage 1 emits it. */
export interface CountChange {
  word: string
  delta: number
  count: number
}

export function lineAt(j: number): string {
  return `${WORDS[j % WORDS.length]} ${WORDS[(j * 7) % WORDS.length]} ${WORDS[(j * 3) % WORDS.length]}`
}

/** Stage 1: counts the line's words and emits every change (through the outbox: exactly once with its batch). */
export function countLine(tx: Transaction, line: string, ctx: EmitContext, topic: string): void {
  const view = tx.value(counts)
  for (const word of line.split(/\s+/).filter(Boolean)) {
    const count = (view.getSync(word) ?? 0) + 1
    view.put(word, count)
    const change: CountChange = { word, delta: 1, count }
    ctx.emit({ topic, key: word, value: JSON.stringify(change) })
  }
}

/** Stage 2: sums the deltas (duplicates never reach it: dedupe: 'tidemark-ids'). */
export function sumChange(tx: Transaction, change: CountChange): void {
  const view = tx.value(counts)
  view.put(change.word, (view.getSync(change.word) ?? 0) + change.delta)
}
