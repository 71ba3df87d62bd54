import { readdirSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { restoreSnapshot } from '../../snapshot/restore/index.js'
import { onInterrupt, removeNow } from '../cleanup.js'
import {
  EXIT, help, JSON_OPTION, layoutOf, noMore, PARTITION_OPTIONS, parse, pathArg, positionsText, print, snapshotIdArg, snapshotStoreArg, withSnapshotStore, type Command,
} from '../context.js'
import { explainNotFound } from '../holdings.js'
import { progressReporter } from '../progress.js'

const USAGE = `usage:
  tidemark restore <snapshot-store-url> --job J --partition P --target DIR [--snapshot ID] [--no-local] [--allow-empty] [--region R] [--json]
      restores the newest usable snapshot (or ID) into DIR, with progress on
      stderr; an intact local store at DIR that is at or after the snapshot
      is kept unless --no-local; DIR must be absent, empty or a partition store

  --region R   the region of an s3:// store (default: the URL's region
               parameter, else AWS_REGION, AWS_DEFAULT_REGION, else us-east-1)`

export const restore: Command = {
  name: 'restore',
  usage: USAGE,
  async run(argv, io) {
    const parsed = parse(argv, {
      ...PARTITION_OPTIONS, ...JSON_OPTION,
      target: { type: 'string' }, snapshot: { type: 'string' }, 'no-local': { type: 'boolean' }, 'allow-empty': { type: 'boolean' },
    })
    if (parsed === undefined) return help(io, USAGE)
    const { positionals: [arg, ...extra], values } = parsed
    const url = snapshotStoreArg(arg)
    noMore(extra)
    const layout = layoutOf(values)
    const target = pathArg(values.target, '--target')
    const snapshot = values.snapshot === undefined ? undefined : snapshotIdArg(values.snapshot, '--snapshot')
    const progress = await progressReporter(io, 'restore', 'bytes')
    const release = onInterrupt(removeDownloads(target))
    const result = await withSnapshotStore(url, values.region, io, async (store) => {
      try {
        return await restoreSnapshot({
          snapshotStore: store,
          job: layout.job,
          partition: layout.partition,
          target,
          ...(snapshot === undefined ? {} : { snapshot }),
          useLocal: values['no-local'] !== true,
          allowEmpty: values['allow-empty'] === true,
          onProgress: (p) => progress.update(p.bytesDownloaded, p.bytesTotal),
          onEvent: (e) => { if (e.type === 'snapshot-skipped') progress.note(`skipped ${e.skipped.id}: ${e.skipped.message}`) },
        })
      } catch (err) {
        throw await explainNotFound(err, store, url, layout, '--allow-empty')
      } finally {
        progress.stop()
      }
    }).finally(release)
    print(io, values.json, result, () => {
      const from = result.source === 'snapshot' ? `snapshot ${result.snapshot!.id}` : result.source === 'local' ? 'the local store (already up to date)' : 'nothing (an empty store)'
      return [
        `restored ${result.target} from ${from}: ${result.files} files, ${result.bytesDownloaded} bytes downloaded in ${Math.round(result.durationMs)} ms`,
        `positions ${positionsText(result.positions)}`,
        ...result.skipped.map((s) => `skipped ${s.id}: ${s.message}`),
      ].join('\n')
    })
    return EXIT.ok
  },
}

/**
 * For a signal during the restore: removes the directory restoreSnapshot
 * downloads into (`.<target>.restore-*` beside the target, removed by the
 * restore itself however else it ends). Only those made after this call: an
 * older one belongs to another run.
 */
function removeDownloads(target: string): () => void {
  const parent = dirname(target)
  const prefix = `.${basename(target)}.restore-`
  const list = (): string[] => {
    try {
      return readdirSync(parent).filter((name) => name.startsWith(prefix))
    } catch {
      return [] // the parent is made by the restore
    }
  }
  const before = new Set(list())
  return () => {
    for (const name of list()) if (!before.has(name)) removeNow(join(parent, name))
  }
}
