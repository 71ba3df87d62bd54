// kafkajs 2.2.4 arms a timer with a negative delay whenever its request queue
// is not throttled, which Node 24 reports with a TimeoutNegativeWarning on
// stderr; connectors/kafka/node24-timeouts.ts clamps it to the 1 ms Node used.
import { createRequire } from 'node:module'
import { afterEach, expect, it, vi } from 'vitest'
import '../../connectors/kafka/index.js'

afterEach(() => { vi.restoreAllMocks() })

it('the request queue of kafkajs never arms a timer with a negative delay', () => {
  const RequestQueue = createRequire(import.meta.url)('kafkajs/src/network/requestQueue/index.js') as { prototype: { scheduleCheckPendingRequests(this: unknown): void } }
  const delays: number[] = []
  vi.spyOn(globalThis, 'setTimeout').mockImplementation(((_fn: () => void, ms?: number) => {
    delays.push(ms ?? 0)
    return 0 as unknown as ReturnType<typeof setTimeout>
  }) as typeof setTimeout)
  const idle = { throttledUntil: -1, pending: [], throttleCheckTimeoutId: null, checkPendingRequests: () => undefined }
  RequestQueue.prototype.scheduleCheckPendingRequests.call(idle)
  const waiting = { throttledUntil: -1, pending: [{}], throttleCheckTimeoutId: null, checkPendingRequests: () => undefined }
  RequestQueue.prototype.scheduleCheckPendingRequests.call(waiting)
  const throttled = { throttledUntil: Date.now() + 5000, pending: [{}], throttleCheckTimeoutId: null, checkPendingRequests: () => undefined }
  RequestQueue.prototype.scheduleCheckPendingRequests.call(throttled)
  expect(delays).toHaveLength(3)
  expect(delays[0]).toBe(1)
  expect(delays[1]).toBe(10)
  expect(delays[2]).toBeGreaterThan(4000)
})
