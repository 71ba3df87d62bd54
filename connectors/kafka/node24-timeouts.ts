/**
 * kafkajs 2.2.4 schedules its request queue's throttle check with
 * `setTimeout(fn, throttledUntil - Date.now())`, about -1.8e12 when nothing
 * is throttled (throttledUntil = -1). Node turns any delay below 1 into 1, so
 * the behaviour is right, but Node 24 also prints a TimeoutNegativeWarning
 * on the stderr of every program that talks to Kafka. This replaces that one
 * method of kafkajs 2.2.4 with the same code and the delay clamped to 1 ms,
 * which is what Node did with it anyway: nothing changes but the warning.
 * It patches the prototype of one kafkajs class (a process-wide change, the
 * only one Tidemark makes) because the queue is created deep inside kafkajs's
 * connections; any other kafkajs version is left alone.
 */
import { createRequire } from 'node:module'

interface RequestQueue {
  throttledUntil: number
  pending: unknown[]
  throttleCheckTimeoutId: ReturnType<typeof setTimeout> | null
  checkPendingRequests(): void
}

/** kafkajs's own constant (src/network/requestQueue/index.js). */
const CHECK_PENDING_REQUESTS_INTERVAL = 10

const require = createRequire(import.meta.url)

function patch(): void {
  let version: string
  let proto: { scheduleCheckPendingRequests?: unknown }
  try {
    version = (require('kafkajs/package.json') as { version: string }).version
    proto = (require('kafkajs/src/network/requestQueue/index.js') as { prototype: { scheduleCheckPendingRequests?: unknown } }).prototype
  } catch {
    return
  }
  if (version !== '2.2.4' || typeof proto.scheduleCheckPendingRequests !== 'function') return
  proto.scheduleCheckPendingRequests = function scheduleCheckPendingRequests(this: RequestQueue): void {
    let scheduleAt = this.throttledUntil - Date.now()
    if (!this.throttleCheckTimeoutId) {
      if (this.pending.length > 0) scheduleAt = scheduleAt > 0 ? scheduleAt : CHECK_PENDING_REQUESTS_INTERVAL
      this.throttleCheckTimeoutId = setTimeout(() => {
        this.throttleCheckTimeoutId = null
        this.checkPendingRequests()
      }, Math.max(1, scheduleAt))
    }
  }
}

patch()
