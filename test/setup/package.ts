// Vitest global setup of `npm run test:package`: packs Tidemark once for all
// its test files (the README's examples, the TypeScript matrix), which
// install that one tarball into apps of their own.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { TestProject } from 'vitest/node'
import { pack } from '../../scripts/package/pack.js'

declare module 'vitest' {
  export interface ProvidedContext {
    /** The packed package (scripts/package/pack.ts's pack()). */
    tarball: string
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const work = await mkdtemp(join(tmpdir(), 'tidemark-tarball-'))
  try {
    project.provide('tarball', await pack(work))
  } catch (error) {
    await rm(work, { recursive: true, force: true })
    throw error
  }
  return () => rm(work, { recursive: true, force: true, maxRetries: 3 })
}
