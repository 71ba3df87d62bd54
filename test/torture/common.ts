// Shared by the torture files: the scale (TORTURE_SCALE=ci|full), a seeded
// random source whose seed is printed so that a failure can be replayed
// (TORTURE_SEED=<n>), the figures each file contributes to the run's JSON
// line, and an S3 bucket per file.
import { CreateBucketCommand, DeleteBucketCommand, DeleteObjectsCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { inject } from 'vitest'
import { S3SnapshotStore } from '../../connectors/s3/index.js'
import type { S3SnapshotStoreOptions } from '../../connectors/s3/options.js'
import { s3Service } from '../helpers/services.js'
import { randomName } from '../helpers/tmp.js'

export type Scale = 'ci' | 'full'

export const SCALE: Scale = (() => {
  const value = process.env.TORTURE_SCALE ?? 'full'
  if (value !== 'ci' && value !== 'full') throw new RangeError(`TORTURE_SCALE must be 'ci' or 'full', got ${JSON.stringify(value)}`)
  return value
})()

/** The CI figure or the full one. */
export function scaled(ci: number, full: number): number {
  return SCALE === 'ci' ? ci : full
}

/** One seed per run (test/torture/figures-setup.ts picks it, or TORTURE_SEED); each file derives its streams from it and their names. */
export function seed(): number {
  return inject('tortureSeed')
}

export interface Rng {
  /** [0, 1) */
  next(): number
  /** An integer in [min, max]. */
  int(min: number, max: number): number
  pick<T>(items: readonly T[]): T
  chance(p: number): boolean
}

/** mulberry32: small, fast and good enough to pick test cases. */
export function rng(name: string): Rng {
  const SEED = seed()
  let state = (SEED ^ hash(name)) >>> 0
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32
  }
  console.log(`[torture] ${name}: seed ${SEED} (reproduce with TORTURE_SEED=${SEED} TORTURE_SCALE=${SCALE})`)
  return {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    pick: (items) => items[Math.floor(next() * items.length)]!,
    chance: (p) => next() < p,
  }
}

function hash(text: string): number {
  let h = 2166136261
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619)
  return h >>> 0
}

/** A time bound for a loop: true once `ms` have passed. */
export function deadline(ms: number): () => boolean {
  const end = performance.now() + ms
  return () => performance.now() > end
}

export type Figures = Record<string, number | Record<string, number>>

/**
 * Adds this file's figures to the run's total (test/torture/figures-setup.ts
 * sums the parts at the end). Numbers add up; maps add up key by key.
 */
export function recordFigures(part: string, figures: Figures): void {
  const dir = inject('tortureFigureParts') as string | undefined
  if (dir === undefined) throw new Error('no figures directory: run the torture suite through vitest.torture.config.ts')
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, `${part}-${process.pid}-${Date.now()}.json`), JSON.stringify(figures))
}

/** Adds `n` to `map[key]`. */
export function count(map: Record<string, number>, key: string, n = 1): void {
  map[key] = (map[key] ?? 0) + n
}

/** A fresh bucket on the test S3 server, and a function that empties and removes it. */
export async function makeBucket(prefix: string): Promise<{ bucket: string; remove(): Promise<void> }> {
  const { endpoint, region, accessKeyId, secretAccessKey } = s3Service()
  const admin = new S3Client({ endpoint, region, forcePathStyle: true, credentials: { accessKeyId, secretAccessKey } })
  const bucket = randomName(prefix)
  await admin.send(new CreateBucketCommand({ Bucket: bucket }))
  return {
    bucket,
    async remove() {
      try {
        for (let more = true; more;) {
          const page = await admin.send(new ListObjectsV2Command({ Bucket: bucket }))
          const keys = (page.Contents ?? []).map((o) => ({ Key: o.Key }))
          if (keys.length > 0) await admin.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: keys, Quiet: true } }))
          more = page.IsTruncated === true
        }
        await admin.send(new DeleteBucketCommand({ Bucket: bucket }))
      } finally {
        admin.destroy()
      }
    },
  }
}

/** An S3 store on the test server (or on `endpoint`, e.g. a fault proxy in front of it). */
export function s3Store(bucket: string, prefix: string, extra: Partial<S3SnapshotStoreOptions> = {}): S3SnapshotStore {
  const { endpoint, region, forcePathStyle, accessKeyId, secretAccessKey } = s3Service()
  return new S3SnapshotStore({ endpoint, region, forcePathStyle, credentials: { accessKeyId, secretAccessKey }, bucket, prefix, ...extra })
}
