import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'

export function benchDir(name: string): { path: string; cleanup(): void } {
  const path = mkdtempSync(join(tmpdir(), `tidemark-bench-${name}-`))
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) }
}

/** Parses --name=value integer flags with defaults. */
export function intFlags<T extends Record<string, number>>(args: string[], defaults: T): T {
  const options = Object.fromEntries(Object.keys(defaults).map((k) => [k, { type: 'string' as const }]))
  const { values } = parseArgs({ args, options, strict: true })
  const out: Record<string, number> = { ...defaults }
  for (const [k, v] of Object.entries(values)) {
    const n = Number(v)
    if (!Number.isSafeInteger(n) || n <= 0) throw new RangeError(`--${k} must be a positive integer, got ${String(v)}`)
    out[k] = n
  }
  return out as T
}

/** A deterministic pseudo-random generator (mulberry32), so runs are comparable. */
export function rng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

export function emit(result: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(result, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))}\n`)
}

export function round(n: number, digits = 3): number {
  const f = 10 ** digits
  return Math.round(n * f) / f
}
