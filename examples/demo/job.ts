/**
 * The demo's stateful job: a running total per key over a stream of sales.
 * Shared by the worker; the verifier in main.ts does not use it.
 */
import { valueState, type EventHandler } from '../../src/index.js'
import type { DemoEvent } from './events.js'

export const JOB = 'demo'
export const TOPIC = 'sales'
export const totals = valueState<number>('totals')

export const addToTotal: EventHandler<DemoEvent> = async (tx, event) => {
  const view = tx.value(totals)
  view.put(event.key, ((await view.get(event.key)) ?? 0) + event.amount)
}
