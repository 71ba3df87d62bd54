import assert from 'node:assert/strict'
import { inspect } from 'node:util'
import { describeValue } from '../util/describe-value.js'

/**
 * The test functions of the caller's runner, so that the suites import no
 * test framework: vitest's `{ test, describe }` (or `it`, `it.concurrent`)
 * or node:test's `{ test, describe }`. Assertions are node:assert's.
 */
export interface SuiteRunner {
  /** Registers one test. Called as `test(name, { timeout }, fn)`, which vitest and node:test both take. */
  test: (name: string, options: { timeout?: number }, fn: () => Promise<void>) => unknown
  /** Groups tests. Without it, each test's name starts with its group's. */
  describe?: (name: string, fn: () => void) => unknown
}

/** What a test body gets: `defer(fn)` runs `fn` after the test, pass or fail, last deferred first. */
export interface TestScope {
  defer(fn: () => unknown): void
}

export function checkRunner(options: unknown, suite: string): SuiteRunner {
  const o = options as { test?: unknown; describe?: unknown } | null
  if (o === null || typeof o !== 'object') throw new TypeError(`${suite}: options must be an object, got ${describeValue(options)}`)
  if (typeof o.test !== 'function') throw new TypeError(`${suite}: options.test must be the runner's test function (vitest's or node:test's test), got ${describeValue(o.test)}`)
  if (o.describe !== undefined && typeof o.describe !== 'function') throw new TypeError(`${suite}: options.describe must be the runner's describe function, got ${describeValue(o.describe)}`)
  return { test: o.test as SuiteRunner['test'], ...(o.describe === undefined ? {} : { describe: o.describe as SuiteRunner['describe'] }) }
}

/** Registers tests and groups on a runner, with a scope of deferred clean-ups per test. */
export class Registrar {
  readonly #runner: SuiteRunner
  readonly #prefix: string[] = []

  constructor(runner: SuiteRunner) {
    this.#runner = runner
  }

  group(name: string, fn: () => void): void {
    if (this.#runner.describe !== undefined) {
      void this.#runner.describe(name, fn)
      return
    }
    this.#prefix.push(name)
    try {
      fn()
    } finally {
      this.#prefix.pop()
    }
  }

  test(name: string, fn: (scope: TestScope) => Promise<void>, timeout?: number): void {
    const fullName = [...this.#prefix, name].join(' > ')
    void this.#runner.test(fullName, timeout === undefined ? {} : { timeout }, async () => {
      const deferred: Array<() => unknown> = []
      try {
        await fn({ defer: (cleanup) => { deferred.push(cleanup) } })
      } finally {
        // Every clean-up runs; the first failure of them is reported, unless the test failed already.
        let failure: unknown
        for (const cleanup of deferred.reverse()) {
          try {
            await cleanup()
          } catch (error) {
            failure ??= error
          }
        }
        if (failure !== undefined) throw failure // eslint-disable-line no-unsafe-finally
      }
    })
  }
}

/**
 * Asserts that `actual` has every property of `expected` with a matching
 * value: objects recursively (extra properties allowed), arrays element by
 * element with the same length, other values by Object.is.
 */
export function assertMatch(actual: unknown, expected: unknown, message?: string): void {
  const where = mismatch(actual, expected, '')
  if (where !== undefined) {
    throw new assert.AssertionError({ message: `${message === undefined ? '' : `${message}: `}${where}`, actual, expected, operator: 'match' })
  }
}

function mismatch(actual: unknown, expected: unknown, path: string): string | undefined {
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return `${path || 'value'} is ${show(actual)}, expected an array`
    if (actual.length !== expected.length) return `${path || 'value'} has ${actual.length} elements, expected ${expected.length}`
    for (let i = 0; i < expected.length; i++) {
      const found = mismatch(actual[i], expected[i], `${path}[${i}]`)
      if (found !== undefined) return found
    }
    return undefined
  }
  if (expected !== null && typeof expected === 'object' && !(expected instanceof Uint8Array)) {
    if (actual === null || typeof actual !== 'object') return `${path || 'value'} is ${show(actual)}, expected an object`
    for (const [key, value] of Object.entries(expected)) {
      const found = mismatch((actual as Record<string, unknown>)[key], value, path === '' ? key : `${path}.${key}`)
      if (found !== undefined) return found
    }
    return undefined
  }
  if (expected instanceof Uint8Array) {
    return actual instanceof Uint8Array && Buffer.from(actual).equals(Buffer.from(expected)) ? undefined : `${path || 'value'} differs from the expected bytes`
  }
  return Object.is(actual, expected) ? undefined : `${path || 'value'} is ${show(actual)}, expected ${show(expected)}`
}

/** Asserts that `promise` rejects with an error matching `expected` (assertMatch). */
export async function rejectsMatching(promise: Promise<unknown>, expected: Record<string, unknown>): Promise<void> {
  let error: unknown
  try {
    await promise
  } catch (err) {
    error = err
  }
  if (error === undefined) throw new assert.AssertionError({ message: `expected a rejection matching ${show(expected)}, but it resolved`, expected, operator: 'rejects' })
  assertMatch(error, expected, 'the rejection')
}

/** Asserts that `fn()` throws synchronously an instance of `type` whose message matches `message`; returns the error. */
export function throwsSync(fn: () => unknown, type: abstract new (...args: never[]) => Error, message?: RegExp): Error {
  let error: unknown
  try {
    fn()
  } catch (err) {
    error = err
  }
  assert.ok(error instanceof type, `expected a ${type.name} thrown, got ${show(error)}`)
  if (message !== undefined) assert.match(error.message, message)
  return error
}

function show(value: unknown): string {
  return inspect(value, { depth: 4, breakLength: Infinity })
}
