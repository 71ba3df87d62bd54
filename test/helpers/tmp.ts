// Fresh temp directories and random names for tests.
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { onTestFinished } from 'vitest'

export interface TempDir {
  path: string
  /** Removes the directory and everything in it; safe to call twice. */
  cleanup(): Promise<void>
}

/**
 * A fresh empty directory under os.tmpdir(), removed when the current test
 * finishes (pass or fail). Call it inside a test; in beforeAll/beforeEach use
 * makeTempDir() and clean up in the matching after-hook.
 */
export function tempDir(prefix = 'tidemark-'): string {
  const dir = makeTempDir(prefix)
  try {
    onTestFinished(() => dir.cleanup())
  } catch (error) {
    rmSync(dir.path, { recursive: true, force: true })
    throw new Error('tempDir() must be called inside a test; use makeTempDir() in hooks', { cause: error })
  }
  return dir.path
}

/** A fresh empty directory under os.tmpdir() that the caller removes with cleanup(). */
export function makeTempDir(prefix = 'tidemark-'): TempDir {
  if (prefix.includes('/') || prefix.includes('\\')) {
    throw new RangeError(`prefix must not contain a path separator, got ${JSON.stringify(prefix)}`)
  }
  const path = mkdtempSync(join(tmpdir(), prefix))
  return {
    path,
    cleanup: () => rm(path, { recursive: true, force: true, maxRetries: 3 }),
  }
}

const NAME_PREFIX = /^[a-z][a-z0-9-]{0,49}$/

/**
 * `${prefix}-` followed by 12 random hex digits: unique per call, and valid both
 * as an S3 bucket name (lowercase, 3-63 characters, starts with a letter, ends
 * with a digit or letter) and as a Kafka topic or group name. The prefix must
 * match /^[a-z][a-z0-9-]{0,49}$/.
 */
export function randomName(prefix: string): string {
  if (!NAME_PREFIX.test(prefix) || prefix.startsWith('xn--') || prefix.startsWith('sthree-')) {
    throw new RangeError(
      `prefix must be 1-50 lowercase letters, digits or hyphens starting with a letter, got ${JSON.stringify(prefix)}`,
    )
  }
  return `${prefix}-${randomBytes(6).toString('hex')}`
}
