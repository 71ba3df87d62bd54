// Vitest global setup of the torture suite (after test/setup/services.ts):
// gives the files a directory for their figures, and at the end sums them
// into one JSON line, printed and written to TORTURE_FIGURES_FILE (default
// test/torture/.last-figures.json) for scripts/readme-figures.ts.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { TestProject } from 'vitest/node'

declare module 'vitest' {
  export interface ProvidedContext {
    tortureFigureParts: string
    tortureSeed: number
  }
}

const ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '../..')
export const DEFAULT_FIGURES_FILE = join(ROOT, 'test/torture/.last-figures.json')

type Figures = Record<string, number | string | string[] | Record<string, number>>

export default function setup(project: TestProject): () => void {
  const dir = mkdtempSync(join(tmpdir(), 'tidemark-torture-figures-'))
  project.provide('tortureFigureParts', dir)
  // One seed for the run, so that TORTURE_SEED=<seed> replays all of it.
  const seed = seedOf(process.env.TORTURE_SEED)
  project.provide('tortureSeed', seed)
  // For figures-reporter.ts, which runs in this process.
  process.env.TORTURE_FIGURE_PARTS = dir
  const started = Date.now()
  return () => {
    const total: Figures = {}
    const files: string[] = []
    for (const name of readdirSync(dir).sort()) {
      if (!name.startsWith('zz-run-result')) files.push(name.replace(/-\d+-\d+\.json$/, ''))
      add(total, JSON.parse(readFileSync(join(dir, name), 'utf8')) as Figures)
    }
    rmSync(dir, { recursive: true, force: true })
    const figures = {
      suite: 'torture',
      scale: process.env.TORTURE_SCALE ?? 'full',
      seed,
      parts: [...new Set(files)],
      ...total,
      durationS: Math.round((Date.now() - started) / 1000),
      date: new Date().toISOString(),
      node: process.version,
      command: `TORTURE_SCALE=${process.env.TORTURE_SCALE ?? 'full'} npm run test:torture`,
      replay: `TORTURE_SEED=${seed} TORTURE_SCALE=${process.env.TORTURE_SCALE ?? 'full'} npm run test:torture`,
    }
    const line = JSON.stringify(figures)
    console.log(line)
    const out = process.env.TORTURE_FIGURES_FILE ?? DEFAULT_FIGURES_FILE
    writeFileSync(out, `${line}\n`)
  }
}

function add(total: Figures, part: Figures): void {
  for (const [key, value] of Object.entries(part)) {
    if (typeof value === 'string' || Array.isArray(value)) {
      total[key] = value
    } else if (typeof value === 'number') {
      const prior = total[key]
      total[key] = (typeof prior === 'number' ? prior : 0) + value
    } else {
      const map = (typeof total[key] === 'object' ? total[key] : (total[key] = {})) as Record<string, number>
      for (const [k, v] of Object.entries(value)) map[k] = (map[k] ?? 0) + v
    }
  }
}

function seedOf(given: string | undefined): number {
  if (given === undefined || given === '') return Math.floor(Math.random() * 2 ** 32) >>> 0
  const n = Number(given)
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`TORTURE_SEED must be a non-negative integer, got ${JSON.stringify(given)}`)
  return n >>> 0
}
