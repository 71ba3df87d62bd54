import { mkdtempSync, rmSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
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

/** The machine's 1, 5 and 15 minute load averages, printed by every bench: a busy machine explains a slow figure. */
export function loadAvg(): number[] {
  return loadavg().map((x) => round(x, 2))
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}

/**
 * The figures of a ratio measured in interleaved pairs: each round measures
 * the raw baseline and the measured side back to back (the order alternates
 * from round to round), and the ratio is taken within each pair, so noise
 * from other processes lands on both sides of a ratio instead of on one.
 * The median of the per-pair ratios is the figure; min and max show the spread.
 */
export interface PairedRatio {
  ratio: number
  ratioMin: number
  ratioMax: number
  rounds: number
  ratios: number[]
}

/**
 * Runs `rounds` pairs of (raw, measured), alternating which goes first, and
 * returns each side's values and the per-pair ratio `ratioOf(raw, measured)`.
 */
export async function interleaved<R, M>(
  rounds: number,
  raw: (round: number) => Promise<R>,
  measured: (round: number) => Promise<M>,
  ratioOf: (raw: R, measured: M) => number,
): Promise<{ raw: R[]; measured: M[] } & PairedRatio> {
  const raws: R[] = []
  const measureds: M[] = []
  const ratios: number[] = []
  for (let r = 0; r < rounds; r++) {
    let a: R
    let b: M
    if (r % 2 === 0) {
      a = await raw(r)
      b = await measured(r)
    } else {
      b = await measured(r)
      a = await raw(r)
    }
    raws.push(a)
    measureds.push(b)
    ratios.push(ratioOf(a, b))
  }
  return { raw: raws, measured: measureds, ...pairedRatio(ratios) }
}

export function pairedRatio(ratios: readonly number[]): PairedRatio {
  return {
    ratio: round(median(ratios)),
    ratioMin: round(Math.min(...ratios)),
    ratioMax: round(Math.max(...ratios)),
    rounds: ratios.length,
    ratios: ratios.map((x) => round(x)),
  }
}

/** The same PairedRatio fields under a prefix: `{ appendRatio1, appendRatio1Min, … }`. */
export function prefixed(name: string, r: PairedRatio): Record<string, number | number[]> {
  return { [name]: r.ratio, [`${name}Min`]: r.ratioMin, [`${name}Max`]: r.ratioMax, [`${name}Rounds`]: r.rounds, [`${name}s`]: r.ratios }
}
