// kafkajs 2.2.4's request queue re-arms a 1 ms timer forever once it is idle
// (and Node 24 warns about its negative delay); connectors/kafka/
// kafkajs-request-queue.ts arms the throttle check only when a request waits.
import { createRequire } from 'node:module'
import { setTimeout as sleep } from 'node:timers/promises'
import { Kafka, logLevel } from 'kafkajs'
import { afterEach, expect, it, vi } from 'vitest'
import '../../connectors/kafka/index.js'
import { kafkaService } from '../helpers/services.js'

afterEach(() => { vi.restoreAllMocks() })

interface Queue { throttledUntil: number; pending: unknown[]; throttleCheckTimeoutId: unknown; checkPendingRequests(): void }
const RequestQueue = createRequire(import.meta.url)('kafkajs/src/network/requestQueue/index.js') as { prototype: { scheduleCheckPendingRequests(this: Queue): void; checkPendingRequests(this: Queue): void } }

it('the throttle check is armed only for a waiting request, with kafkajs\'s delays and never a negative one', () => {
  const delays: number[] = []
  vi.spyOn(globalThis, 'setTimeout').mockImplementation(((_fn: () => void, ms?: number) => {
    delays.push(ms ?? 0)
    return 1 as unknown as ReturnType<typeof setTimeout>
  }) as typeof setTimeout)
  const queue = (over: Partial<Queue>): Queue => ({ throttledUntil: -1, pending: [], throttleCheckTimeoutId: null, checkPendingRequests: () => undefined, ...over })
  const schedule = (q: Queue): void => { RequestQueue.prototype.scheduleCheckPendingRequests.call(q) }
  schedule(queue({}))                                                     // idle: nothing to send, no timer
  schedule(queue({ throttledUntil: Date.now() + 5000 }))                  // throttled but idle: no timer
  schedule(queue({ pending: [{}] }))                                      // waiting behind in-flight requests: 10 ms
  schedule(queue({ throttledUntil: Date.now() + 5000, pending: [{}] }))   // throttled: when the throttle ends
  schedule(queue({ pending: [{}], throttleCheckTimeoutId: 7 }))           // one timer at a time
  expect(delays).toHaveLength(2)
  expect(delays[0]).toBe(10)
  expect(delays[1]).toBeGreaterThan(4000)
})

it('an idle client connected to Kafka runs no timer loop (kafkajs 2.2.4 alone checks its queue ~1,000 times a second per connection)', async () => {
  const checks = vi.spyOn(RequestQueue.prototype, 'checkPendingRequests')
  const admin = new Kafka({ brokers: kafkaService().brokers, clientId: 'idle-check', logLevel: logLevel.NOTHING }).admin()
  await admin.connect()
  try {
    await admin.listTopics()
    checks.mockClear()
    // A window of idleness: what is measured is that nothing happens in it.
    await sleep(300)
    expect(checks.mock.calls.length).toBeLessThan(5)
    // and a request still goes through (the queue sends at once when it can; fulfilling runs the check).
    await admin.listTopics()
    expect(checks.mock.calls.length).toBeGreaterThan(0)
  } finally {
    await admin.disconnect()
  }
})
