/**
 * The demo's stateful job: a running total per key over a stream of sales.
 * Shared by the worker; the verifier in main.ts does not use it.
 */
import { valueState, type EventHandler } from '../../src/index.js'
import type { DemoEvent } from './events.js'

export const JOB = 'demo'
export const TOPIC = 'sales'
export const totals = valueState<number>('totals')

// Synchronous: the processor holds the store open while a handler runs, so
// getSync() never meets a checkpoint and no await is needed per event.
export const addToTotal: EventHandler<DemoEvent> = (tx, event) => {
  const view = tx.value(totals)
  view.put(event.key, (view.getSync(event.key) ?? 0) + event.amount)
}
