#!/usr/bin/env node
/**
 * `tidemark`: operator commands for partition stores and snapshots.
 * Every command prints one JSON document on stdout; progress and errors go
 * to stderr; the exit code is 0 on success, 1 on a TidemarkError, 2 on a
 * usage error.
 */
import { realpathSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import { isTidemarkError } from '../errors.js'
import { openSnapshotStore } from '../dfs/open.js'
import type { SnapshotStore } from '../dfs/snapshot-store.js'
import { PartitionStore } from '../store/partition-store.js'
import { collectGarbage } from '../snapshot/gc.js'
import { listManifests, readManifest } from '../snapshot/catalog.js'
import { SnapshotLayout } from '../snapshot/layout.js'
import { SNAPSHOT_DEFAULTS } from '../snapshot/options.js'
import { restoreSnapshot } from '../snapshot/restore.js'

const USAGE = `usage:
  tidemark positions <store-dir>
      the source positions committed in a partition store
  tidemark snapshots <snapshot-store-url> --job J --partition P
      the partition's snapshots, newest first
  tidemark restore <snapshot-store-url> --job J --partition P --target DIR [--snapshot ID] [--no-local] [--allow-empty]
      restores the newest usable snapshot (or ID) into DIR, with progress on stderr
  tidemark gc <snapshot-store-url> --job J --partition P [--retain N] [--grace-ms MS]
      deletes snapshots beyond the newest N and objects no kept snapshot references

snapshot store URLs: file:///abs/path or s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1`

class UsageError extends Error {}

function json(value: unknown): string {
  return JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2)
}

function need<T>(value: T | undefined, name: string): T {
  if (value === undefined) throw new UsageError(`missing ${name}`)
  return value
}

function int(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback
  const n = Number(value)
  if (!Number.isSafeInteger(n) || n < 0) throw new UsageError(`${name} must be a non-negative integer, got ${value}`)
  return n
}

/** Opens the snapshot store named by the command's URL argument for the duration of fn. */
async function withSnapshotStore(url: string | undefined, fn: (store: SnapshotStore) => Promise<unknown>): Promise<number> {
  const store = await openSnapshotStore(need(url, '<snapshot-store-url>'))
  try {
    process.stdout.write(`${json(await fn(store))}\n`)
  } finally {
    await store.close()
  }
  return 0
}

export async function main(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      job: { type: 'string' }, partition: { type: 'string' }, target: { type: 'string' }, snapshot: { type: 'string' },
      'no-local': { type: 'boolean' }, 'allow-empty': { type: 'boolean' }, retain: { type: 'string' }, 'grace-ms': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  const [command, arg] = positionals
  if (values.help || command === undefined) {
    process.stdout.write(`${USAGE}\n`)
    return values.help ? 0 : 2
  }
  switch (command) {
    case 'positions': {
      const store = await PartitionStore.open({ path: need(arg, '<store-dir>') })
      try {
        process.stdout.write(`${json({ path: store.path, positions: store.positions() })}\n`)
      } finally {
        await store.close()
      }
      return 0
    }
    case 'snapshots':
      return withSnapshotStore(arg, async (store) => {
        const layout = new SnapshotLayout(need(values.job, '--job'), need(values.partition, '--partition'))
        const out = []
        for (const ref of await listManifests(store, layout)) {
          try {
            const m = await readManifest(store, layout, ref)
            out.push({ id: m.id, epoch: m.epoch, sequence: m.sequence, createdAt: m.createdAt, full: m.full, positions: m.positions, stateBytes: m.stateBytes, files: m.files.length, objects: m.objects.length })
          } catch (err) {
            out.push({ id: ref.id, unreadable: (err as Error).message })
          }
        }
        return out
      })
    case 'restore':
      return withSnapshotStore(arg, (store) => restoreSnapshot({
        snapshotStore: store,
        job: need(values.job, '--job'),
        partition: need(values.partition, '--partition'),
        target: need(values.target, '--target'),
        ...(values.snapshot === undefined ? {} : { snapshot: values.snapshot }),
        useLocal: values['no-local'] !== true,
        allowEmpty: values['allow-empty'] === true,
        onProgress: (p) => process.stderr.write(`restore ${p.snapshot}: ${p.bytesDownloaded}/${p.bytesTotal} bytes, ${p.filesDone}/${p.filesTotal} files\n`),
        onEvent: (e) => { if (e.type === 'snapshot-skipped') process.stderr.write(`skipped ${e.skipped.id}: ${e.skipped.message}\n`) },
      }))
    case 'gc':
      return withSnapshotStore(arg, (store) => collectGarbage(store, new SnapshotLayout(need(values.job, '--job'), need(values.partition, '--partition')), {
        retain: Math.max(1, int(values.retain, '--retain', SNAPSHOT_DEFAULTS.retain)),
        graceMs: int(values['grace-ms'], '--grace-ms', SNAPSHOT_DEFAULTS.graceMs),
        now: Date.now(),
        protect: new Set(),
        cache: new Map(),
      }))
    default:
      throw new UsageError(`unknown command ${JSON.stringify(command)}`)
  }
}

// Run when executed (the bin), not when imported by a test.
if (process.argv[1] !== undefined && pathToFileURL(realpathSync(process.argv[1])).href === import.meta.url) {
  main(process.argv.slice(2)).then(
    (code) => { process.exitCode = code },
    (err: unknown) => {
      if (err instanceof UsageError || err instanceof TypeError || err instanceof RangeError) {
        process.stderr.write(`tidemark: ${err.message}\n${USAGE}\n`)
        process.exitCode = 2
      } else {
        process.stderr.write(`tidemark: ${isTidemarkError(err) ? `${err.code}: ` : ''}${(err as Error)?.message ?? err}\n`)
        process.exitCode = 1
      }
    },
  )
}
