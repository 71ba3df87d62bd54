/**
 * kafkajs 2.2.4's request queue re-arms its throttle-check timer every time
 * the check runs, also when nothing waits to be sent: with nothing throttled
 * the delay is `throttledUntil - Date.now()` (about -1.8e12, which Node turns
 * into 1 ms), so every connection runs a 1 ms timer loop for its lifetime.
 * An idle consumer of 32 partitions spent 5-7 % of a core in it (epoll woke
 * ~1,700 times a second; `npm run bench -- idle`), and Node 24 prints a
 * TimeoutNegativeWarning for it on the stderr of every program (kafkajs
 * issues #1556, #1704, #1751; PRs #1667 and #1768, unreleased).
 *
 * This replaces that one method of kafkajs 2.2.4 with the same code, except
 * that with no pending request it arms nothing: the timer's only job is to
 * send queued requests once a throttle ends, and push() arms it again when
 * it queues one (fulfilled and timed-out requests run the check directly).
 * With requests pending the delays are kafkajs's own: the throttle's end, or
 * 10 ms. It patches the prototype of one kafkajs class (a process-wide
 * change, the only one Tidemark makes, and it also applies to the program's
 * own kafkajs clients) because the queue is created deep inside kafkajs's
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
    if (this.throttleCheckTimeoutId || this.pending.length === 0) return
    const untilUnthrottled = this.throttledUntil - Date.now()
    this.throttleCheckTimeoutId = setTimeout(() => {
      this.throttleCheckTimeoutId = null
      this.checkPendingRequests()
    }, untilUnthrottled > 0 ? untilUnthrottled : CHECK_PENDING_REQUESTS_INTERVAL)
  }
}

patch()
