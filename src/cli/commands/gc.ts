import type { SnapshotStore } from '../../snapshot-store/snapshot-store.js'
import { collectGarbage } from '../../snapshot/gc.js'
import { SNAPSHOT_DEFAULTS } from '../../snapshot/options.js'
import { EXIT, help, int, JSON_OPTION, layoutOf, noMore, PARTITION_OPTIONS, parse, print, snapshotStoreArg, withSnapshotStore, type CliIO, type Command } from '../context.js'
import { holdingsHint } from '../holdings.js'

const USAGE = `usage:
  tidemark gc <snapshot-store-url> --job J --partition P [--retain N] [--grace-ms MS] [--dry-run] [--region R] [--json]
      deletes snapshots beyond the newest N that verify (N >= 1, default ${SNAPSHOT_DEFAULTS.retain}) and
      data objects no kept snapshot references (older than MS, default ${SNAPSHOT_DEFAULTS.graceMs});
      --dry-run lists what would be deleted and deletes nothing

  --region R   the region of an s3:// store (default: the URL's region
               parameter, else AWS_REGION, AWS_DEFAULT_REGION, else us-east-1)`

/**
 * The store as GC sees it in a dry run: reads pass through, deletes are
 * recorded and not made, and temporary files are not swept. collectGarbage
 * decides everything from one listing taken before its first delete, so
 * what it reports here is what a real run would delete now.
 */
function dryRunView(store: SnapshotStore): SnapshotStore {
  return {
    url: store.url,
    capabilities: store.capabilities,
    put: () => Promise.reject(new Error('gc --dry-run never writes')),
    get: (key, options) => store.get(key, options),
    head: (key) => store.head(key),
    list: (prefix, options) => store.list(prefix, options),
    deleteMany: async () => {},
    close: async () => {},
  }
}

export const gc: Command = {
  name: 'gc',
  usage: USAGE,
  async run(argv: string[], io: CliIO): Promise<number> {
    const parsed = parse(argv, { ...PARTITION_OPTIONS, ...JSON_OPTION, retain: { type: 'string' }, 'grace-ms': { type: 'string' }, 'dry-run': { type: 'boolean' } })
    if (parsed === undefined) return help(io, USAGE)
    const { positionals: [arg, ...extra], values } = parsed
    const url = snapshotStoreArg(arg)
    noMore(extra)
    const layout = layoutOf(values)
    // At least 1: gc with nothing retained would delete every snapshot.
    const retain = int(values.retain, '--retain', SNAPSHOT_DEFAULTS.retain, 1)
    const graceMs = int(values['grace-ms'], '--grace-ms', SNAPSHOT_DEFAULTS.graceMs, 0)
    const dryRun = values['dry-run'] === true
    const result = await withSnapshotStore(url, values.region, io, async (store) => {
      const collected = await collectGarbage(dryRun ? dryRunView(store) : store, layout, { retain, graceMs, now: Date.now(), protect: new Set(), cache: new Map() })
      // No manifest at all: a mistyped --job or --partition more likely than a partition without snapshots.
      if (collected.retained.length === 0 && collected.unverified.length === 0 && collected.deletedManifests.length === 0) {
        io.stderr.write(`tidemark: no snapshots of ${layout.job}/${layout.partition}; ${await holdingsHint(store, url, layout)}\n`)
      }
      return collected
    })
    const report = { dryRun, ...result }
    const verb = dryRun ? 'would delete' : 'deleted'
    print(io, values.json, report, () => [
      `retained ${result.retained.length === 0 ? 'no snapshots' : result.retained.join(' ')}`,
      ...result.unverified.map((u) => `kept, does not verify: ${u.id}: ${u.message}`),
      `${verb} ${result.deletedManifests.length} manifests, ${result.deletedObjects.length} data objects`,
      ...[...result.deletedManifests, ...result.deletedObjects].map((k) => `  ${k}`),
      `kept ${result.youngObjects} unreferenced objects younger than ${graceMs} ms, ${result.pendingObjects} of uploads in flight`,
      ...(dryRun ? [] : [`removed ${result.temporaryFilesRemoved} temporary files`]),
      ...(result.objectsSkipped === undefined ? [] : [result.objectsSkipped]),
    ].join('\n'))
    return EXIT.ok
  },
}
