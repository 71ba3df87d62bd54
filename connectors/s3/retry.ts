import { setTimeout as sleep } from 'node:timers/promises'

export interface RetryPolicy {
  /** Attempts in all, the first included. */
  maxAttempts: number
  baseDelayMs: number
  maxDelayMs: number
}

/**
 * Exponential backoff with jitter: a random point in the upper half of the
 * exponential step, so that clients throttled together do not come back
 * together, and no retry comes back at once.
 */
export function backoffMs(policy: RetryPolicy, retry: number): number {
  const step = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (retry - 1))
  return step / 2 + Math.random() * (step / 2)
}

/**
 * Calls `fn` until it succeeds, `isRetriable` says no, or the attempts run
 * out; then throws `giveUp(lastError, attempts)`. Caller mistakes (TypeError,
 * RangeError) are never retried: the same call cannot succeed.
 */
export async function withRetry<T>(
  policy: RetryPolicy,
  fn: () => Promise<T>,
  isRetriable: (err: unknown) => boolean,
  giveUp: (err: unknown, attempts: number) => unknown,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn()
    } catch (err) {
      if (err instanceof TypeError || err instanceof RangeError || attempt >= policy.maxAttempts || !isRetriable(err)) {
        throw giveUp(err, attempt)
      }
      await sleep(backoffMs(policy, attempt))
    }
  }
}
