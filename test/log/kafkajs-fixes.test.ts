// The two fixes of kafkajs 2.2.4 in connectors/kafka/kafkajs-fixes.ts: its
// request queue re-arms a 1 ms timer forever once it is idle (and Node 24
// warns about its negative delay); a fetch with every partition paused
// sleeps the whole fetch wait, and a resume() does not end it.
import { createRequire } from 'node:module'
import { Kafka, logLevel, Partitioners } from 'kafkajs'
import { afterEach, expect, it, onTestFinished, vi } from 'vitest'
import '../../connectors/kafka/index.js'
import { kafkaService } from '../helpers/services.js'
import { randomName } from '../helpers/tmp.js'

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
  // Counted, not timed: kafkajs alone leaves a 1 ms check armed on every idle
  // queue (and re-arms it each time it runs); fixed, an idle queue has none.
  const schedule = vi.spyOn(RequestQueue.prototype, 'scheduleCheckPendingRequests')
  const admin = new Kafka({ brokers: kafkaService().brokers, clientId: 'idle-check', logLevel: logLevel.NOTHING }).admin()
  await admin.connect()
  try {
    await admin.listTopics()
    // The response settles the request before its queue runs the check: one turn of the loop.
    await new Promise((resolve) => setImmediate(resolve))
    const queues = new Set(schedule.mock.contexts as Queue[])
    expect(queues.size).toBeGreaterThan(0)
    for (const queue of queues) {
      expect(queue.pending).toEqual([])
      expect(queue.throttleCheckTimeoutId).toBeNull()
    }
    // and a request still goes through (the queue sends at once when it can; fulfilling runs the check).
    const checks = vi.spyOn(RequestQueue.prototype, 'checkPendingRequests')
    await admin.listTopics()
    expect(checks.mock.calls.length).toBeGreaterThan(0)
  } finally {
    await admin.disconnect()
  }
})

it('a fetch that sleeps because every partition is paused ends when one is resumed, not after the whole fetch wait', { timeout: 30_000 }, async () => {
  // A length no other timer of the client has (its session and rebalance timeouts are 6000).
  const WAIT = 6543
  const { brokers } = kafkaService()
  const kafka = new Kafka({ brokers, clientId: 'paused-fetch', logLevel: logLevel.NOTHING })
  const topic = randomName('paused-fetch')
  const producer = kafka.producer({ allowAutoTopicCreation: true, createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  onTestFinished(() => producer.disconnect())
  await producer.send({ topic, acks: -1, messages: [{ value: 'a', partition: 0 }, { value: 'b', partition: 0 }] })
  const consumer = kafka.consumer({ groupId: randomName('paused-fetch'), maxWaitTimeInMs: WAIT, sessionTimeout: 6000, rebalanceTimeout: 6000, heartbeatInterval: 500 })
  onTestFinished(() => consumer.disconnect())
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  // The sleep of a fetch with nothing to fetch is a timer of the fetch wait:
  // that is the moment to resume at, and whether it ran out is what is checked.
  const realSetTimeout = globalThis.setTimeout
  let sleeping: (() => void) | undefined
  let ranOut = 0
  vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: (...a: unknown[]) => void, ms?: number, ...rest: unknown[]) => {
    if (ms !== WAIT) return realSetTimeout(fn, ms, ...rest)
    sleeping?.()
    return realSetTimeout((...a: unknown[]) => {
      ranOut++
      fn(...a)
    }, ms, ...rest)
  }) as typeof setTimeout)
  const asleep = new Promise<void>((resolve) => { sleeping = resolve })
  let batches = 0
  let again: () => void = () => undefined
  const fetchedAgain = new Promise<void>((resolve) => { again = resolve })
  await consumer.run({
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset }) => {
      batches++
      // The first batch pauses every partition of the member and resolves
      // nothing: after the resume the same records come again.
      if (batches === 1) {
        consumer.pause([{ topic }])
        return
      }
      for (const m of batch.messages) resolveOffset(m.offset)
      again()
    },
  })
  await asleep
  consumer.resume([{ topic }])
  await fetchedAgain
  // kafkajs 2.2.4 alone: the records come only once the sleep's timer ran out.
  expect(ranOut).toBe(0)
})
