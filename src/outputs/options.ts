import type { DedupeMode, OutputsOptions } from './types.js'
import { describeValue } from '../util/describe-value.js'

export const OUTPUTS_DEFAULTS = Object.freeze({
  maxOutboxRecords: 100_000,
  maxOutboxBytes: 64 * 1024 * 1024,
  maxBatchRecords: 500,
  retry: Object.freeze({ initialMs: 100, maxMs: 10_000 }),
  closeTimeoutMs: 10_000,
})

export interface ResolvedOutputs {
  readonly sink: OutputsOptions['sink']
  readonly maxOutboxRecords: number
  readonly maxOutboxBytes: number
  readonly maxBatchRecords: number
  readonly retry: Readonly<{ initialMs: number; maxMs: number }>
  readonly closeTimeoutMs: number
}

const positiveInt = (value: unknown, field: string): number => {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) throw new RangeError(`${field} must be a positive integer, got ${JSON.stringify(value)}`)
  return value
}

/** Checks options.outputs once; `field` names it in messages. */
export function resolveOutputs(value: OutputsOptions | undefined, field = 'options.outputs'): ResolvedOutputs | undefined {
  if (value === undefined) return undefined
  if (value === null || typeof value !== 'object') throw new TypeError(`${field} must be an object, got ${describeValue(value)}`)
  const known = ['sink', 'maxOutboxRecords', 'maxOutboxBytes', 'maxBatchRecords', 'retry', 'closeTimeoutMs']
  for (const name of Object.keys(value)) if (!known.includes(name)) throw new RangeError(`unknown option ${field}.${name}; known: ${known.join(', ')}`)
  const sink = value.sink
  if (sink === null || typeof sink !== 'object' || typeof sink.send !== 'function' || typeof sink.close !== 'function') {
    throw new TypeError(`${field}.sink must be an OutputSink (send(records), close()), for example kafkaSink() or fileLogSink()`)
  }
  if (sink.sendEncoded !== undefined && typeof sink.sendEncoded !== 'function') throw new TypeError(`${field}.sink.sendEncoded must be a function when set, got ${typeof sink.sendEncoded}`)
  const retry = value.retry ?? {}
  if (retry === null || typeof retry !== 'object') throw new TypeError(`${field}.retry must be an object`)
  const initialMs = positiveInt(retry.initialMs ?? OUTPUTS_DEFAULTS.retry.initialMs, `${field}.retry.initialMs`)
  const maxMs = positiveInt(retry.maxMs ?? OUTPUTS_DEFAULTS.retry.maxMs, `${field}.retry.maxMs`)
  if (maxMs < initialMs) throw new RangeError(`${field}.retry.maxMs (${maxMs}) must be at least retry.initialMs (${initialMs})`)
  return Object.freeze({
    sink,
    maxOutboxRecords: positiveInt(value.maxOutboxRecords ?? OUTPUTS_DEFAULTS.maxOutboxRecords, `${field}.maxOutboxRecords`),
    maxOutboxBytes: positiveInt(value.maxOutboxBytes ?? OUTPUTS_DEFAULTS.maxOutboxBytes, `${field}.maxOutboxBytes`),
    maxBatchRecords: positiveInt(value.maxBatchRecords ?? OUTPUTS_DEFAULTS.maxBatchRecords, `${field}.maxBatchRecords`),
    retry: Object.freeze({ initialMs, maxMs }),
    closeTimeoutMs: positiveInt(value.closeTimeoutMs ?? OUTPUTS_DEFAULTS.closeTimeoutMs, `${field}.closeTimeoutMs`),
  })
}

export function resolveDedupe(value: DedupeMode | undefined, field = 'options.dedupe'): DedupeMode {
  if (value === undefined) return 'off'
  if (value !== 'off' && value !== 'tidemark-ids') throw new RangeError(`${field} must be 'off' or 'tidemark-ids', got ${JSON.stringify(value)}`)
  return value
}
