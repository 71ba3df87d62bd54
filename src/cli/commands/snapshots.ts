import { TidemarkError } from '../../errors.js'
import type { SnapshotStore } from '../../snapshot-store/snapshot-store.js'
import { listManifests, readManifest, type ManifestRef } from '../../snapshot/catalog.js'
import type { SnapshotLayout } from '../../snapshot/layout.js'
import type { SnapshotManifest } from '../../snapshot/manifest.js'
import {
  EXIT, group, help, JSON_OPTION, layoutOf, noMore, PARTITION_OPTIONS, parse, positionsText, print, snapshotIdArg, snapshotStoreArg, table, UsageError, withSnapshotStore, type CliIO,
} from '../context.js'
import { holdingsHint } from '../holdings.js'
import { progressReporter } from '../progress.js'
import { verifySnapshots, type VerifyReport } from '../snapshot-verify.js'

const USAGE = `usage:
  tidemark snapshots list <snapshot-store-url> --job J --partition P [--json]
      the partition's snapshots, newest first
  tidemark snapshots show <snapshot-store-url> <ID> --job J --partition P [--json]
      one snapshot's manifest: positions, files, objects
  tidemark snapshots verify <snapshot-store-url> [<ID> | --all] --job J --partition P [--json]
      downloads every object of the snapshot (the newest by default, ID, or
      every one with --all) and checks each file's SHA-256, its tar header
      and padding, and each object's size, writing nothing; one report per
      snapshot; exit 1 if any fails

  --region R   the region of an s3:// store (default: the URL's region
               parameter, else AWS_REGION, AWS_DEFAULT_REGION, else us-east-1)`

const OPTIONS = { ...PARTITION_OPTIONS, ...JSON_OPTION } as const

/** The listed manifest of one id, or TIDEMARK_SNAPSHOT_NOT_FOUND (with what the store holds, when the partition has no snapshots at all). */
async function findRef(store: SnapshotStore, url: string, layout: SnapshotLayout, id: string): Promise<ManifestRef> {
  const refs = await listManifests(store, layout)
  const ref = refs.find((r) => r.id === id)
  if (ref === undefined) {
    const hint = refs.length === 0 ? `; ${layout.job}/${layout.partition} has no snapshots: ${await holdingsHint(store, url, layout)}` : ''
    throw new TidemarkError('TIDEMARK_SNAPSHOT_NOT_FOUND', `snapshot ${id} of ${layout.job}/${layout.partition} does not exist${hint}`, { details: { id, skipped: [] } })
  }
  return ref
}

async function list(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, OPTIONS)
  if (parsed === undefined) return help(io, USAGE)
  const { positionals: [arg, ...extra], values } = parsed
  const url = snapshotStoreArg(arg)
  noMore(extra)
  const layout = layoutOf(values)
  const listed = await withSnapshotStore(url, values.region, io, async (store) => {
    const out: Array<{ id: string; unreadable?: string; epoch?: number; sequence?: number; createdAt?: string; full?: boolean; positions?: SnapshotManifest['positions']; stateBytes?: number; files?: number; objects?: number }> = []
    for (const ref of await listManifests(store, layout)) {
      try {
        const m = await readManifest(store, layout, ref)
        out.push({ id: m.id, epoch: m.epoch, sequence: m.sequence, createdAt: m.createdAt, full: m.full, positions: m.positions, stateBytes: m.stateBytes, files: m.files.length, objects: m.objects.length })
      } catch (err) {
        out.push({ id: ref.id, unreadable: (err as Error).message })
      }
    }
    // On stderr: --json's stdout stays the (empty) list.
    if (out.length === 0) io.stderr.write(`tidemark: ${await holdingsHint(store, url, layout)}\n`)
    return out
  })
  print(io, values.json, listed, () => listed.length === 0
    ? `no snapshots of ${layout.job}/${layout.partition}`
    : table(['id', 'created', 'kind', 'state bytes', 'files', 'positions'], listed.map((s) => s.unreadable !== undefined
      ? [s.id, '-', 'UNREADABLE', '-', '-', s.unreadable]
      : [s.id, s.createdAt ?? '-', s.full === true ? 'full' : 'incremental', String(s.stateBytes), String(s.files), positionsText(s.positions ?? [])])))
  return EXIT.ok
}

async function show(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, OPTIONS)
  if (parsed === undefined) return help(io, USAGE)
  const { positionals: [arg, idArg, ...extra], values } = parsed
  const url = snapshotStoreArg(arg)
  const id = snapshotIdArg(idArg, '<ID>')
  noMore(extra)
  const layout = layoutOf(values)
  const manifest = await withSnapshotStore(url, values.region, io, async (store) => readManifest(store, layout, await findRef(store, url, layout, id)))
  print(io, values.json, manifest, () => [
    `snapshot   ${manifest.id} (${manifest.full ? 'full' : `incremental, base ${manifest.base}`})`,
    `job        ${manifest.job} partition ${manifest.partition}, epoch ${manifest.epoch}, sequence ${manifest.sequence}`,
    `created    ${manifest.createdAt}`,
    `parent     ${manifest.parent ?? '-'}`,
    `positions  ${positionsText(manifest.positions)}`,
    `state      ${manifest.stateBytes} bytes in ${manifest.files.length} files, ${manifest.objects.length} objects`,
    '',
    table(['file', 'size', 'sha256', 'object'], manifest.files.map((f) => [f.name, String(f.size), f.sha256, f.object])),
  ].join('\n'))
  return EXIT.ok
}

async function verify(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, { ...OPTIONS, all: { type: 'boolean' } })
  if (parsed === undefined) return help(io, USAGE)
  const { positionals: [arg, id, ...extra], values } = parsed
  const url = snapshotStoreArg(arg)
  noMore(extra)
  if (id !== undefined && values.all === true) throw new UsageError(`give either <ID> or --all, not both`)
  if (id !== undefined) snapshotIdArg(id, '<ID>')
  const layout = layoutOf(values)
  const reports = await withSnapshotStore(url, values.region, io, async (store) => {
    let refs: ManifestRef[]
    if (id !== undefined) refs = [await findRef(store, url, layout, id)]
    else {
      refs = await listManifests(store, layout)
      if (refs.length === 0) throw new TidemarkError('TIDEMARK_SNAPSHOT_NOT_FOUND', `no snapshots of ${layout.job}/${layout.partition} to verify; ${await holdingsHint(store, url, layout)}`, { details: { skipped: [] } })
      if (values.all !== true) refs = refs.slice(0, 1)
    }
    const progress = await progressReporter(io, 'verify', 'bytes')
    try {
      return await verifySnapshots(store, layout, refs, (done, total) => progress.update(done, total))
    } finally {
      progress.stop()
    }
  })
  print(io, values.json, reports, () => reports.map(reportText).join('\n'))
  return reports.every((r) => r.ok) ? EXIT.ok : EXIT.failed
}

function reportText(r: VerifyReport): string {
  if (r.ok) return `ok      ${r.id}: ${r.files} files, ${r.bytes} bytes`
  return [`FAILED  ${r.id}: ${r.problems.length} problem${r.problems.length === 1 ? '' : 's'}`, ...r.problems.map((p) => `  ${p.reason}: ${p.message}`)].join('\n')
}

export const snapshots = group('snapshots', USAGE, { list, show, verify })
