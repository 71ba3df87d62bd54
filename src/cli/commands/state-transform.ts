import { openLogForReading } from '../../log/existing.js'
import type { FileLog } from '../../log/file-log/index.js'
import type { StateDefinition } from '../../store/state.js'
import { transformState, type TransformStateOptions } from '../../transform/index.js'
import { withTempDir } from '../cleanup.js'
import {
  bigintOf, EXIT, help, int, layoutOf, need, noMore, parse, partitionArg, pathArg, snapshotIdArg, snapshotStoreArg, UsageError, withSnapshotStore, type CliIO,
} from '../context.js'
import { explainNotFound } from '../holdings.js'
import { printResult, transformReporter } from '../transform-report.js'
import { loadHandler, loadTransformModule } from '../user-module.js'

export const TRANSFORM_USAGE = `usage:
  tidemark state transform <snapshot-store-url> --job J --partition P --to-job J2 --module MODULE
      [--to-partition P2] [--snapshot ID | --offset N --log DIR --topic T --handler HMODULE]
      [--replace] [--drop-unlisted] [--batch-size N] [--region R]
      reads J's partition P at its newest snapshot (or ID, or as of offset N:
      the newest snapshot at or before N, then the file log at DIR replayed
      up to N through HMODULE's handler), runs MODULE's transform over it,
      and writes the result as a new snapshot of J2's partition P2 (default
      P), with P's positions: a job started on it resumes exactly there.
      MODULE exports { states } (the definitions of the program that runs
      on the result), optionally sourceStates (the source program's; default
      HMODULE's states, else states), and transform (entry, target) =>
      entries (per key; also a default export function) or perState (state,
      target) => void; without either every entry is copied. J2 = J with
      P2 = P replaces the partition's state: its claim is taken by force, so
      a running owner stops (TIDEMARK_OWNERSHIP_LOST), and the snapshot
      becomes its newest. Another partition with snapshots is refused unless
      --replace. Source states MODULE does not declare are refused unless
      --drop-unlisted. Progress on stderr; one JSON line on stdout:
      {"job","partition","snapshot","positions","lineage","source","read","written","states"}`

/** `tidemark state transform`: transformState (src/transform/) from one partition's snapshot into another's, or the same. */
export async function transform(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, {
    job: { type: 'string' }, partition: { type: 'string' }, region: { type: 'string' }, topic: { type: 'string' },
    snapshot: { type: 'string' }, offset: { type: 'string' }, log: { type: 'string' }, handler: { type: 'string' },
    'to-job': { type: 'string' }, 'to-partition': { type: 'string' }, module: { type: 'string' },
    replace: { type: 'boolean' }, 'drop-unlisted': { type: 'boolean' }, 'batch-size': { type: 'string' }, json: { type: 'boolean' },
  })
  if (parsed === undefined) return help(io, TRANSFORM_USAGE)
  const { positionals: [urlArg, ...extra], values } = parsed
  const url = snapshotStoreArg(urlArg)
  noMore(extra)
  const pointInTime = values.offset !== undefined
  // --topic is the file log's topic of a point-in-time read, and no part of the partition's name.
  const from = layoutOf(pointInTime ? { job: values.job, partition: values.partition } : { job: values.job, partition: values.partition, topic: values.topic })
  const to = layoutOf({ job: need(values['to-job'], '--to-job'), partition: values['to-partition'] === undefined ? from.partition : partitionArg(values['to-partition'], '--to-partition') })
  const modulePath = pathArg(values.module, '--module')
  const batchSize = int(values['batch-size'], '--batch-size', 10_000, 1)
  if (pointInTime && values.snapshot !== undefined) throw new UsageError('give either --snapshot or --offset, not both')
  for (const name of ['log', 'topic', 'handler'] as const) {
    if (!pointInTime && values[name] !== undefined) throw new UsageError(`--${name} goes with --offset`)
  }
  let point: { offset: bigint; topic: string; logDir: string; handlerPath: string } | undefined
  if (pointInTime) {
    if (!/^\d+$/.test(from.partition)) throw new UsageError(`--offset replays an embedded file log (--log) into a PartitionProcessor job's partition, a number; ${from.partition} is a consumer group's partition: transform one of its snapshots (--snapshot ID)`)
    point = { offset: bigintOf(values.offset!, '--offset'), topic: need(values.topic, '--topic'), logDir: pathArg(values.log, '--log'), handlerPath: pathArg(values.handler, '--handler') }
  }
  const snapshot = values.snapshot === undefined ? undefined : snapshotIdArg(values.snapshot, '--snapshot')
  const handler = point === undefined ? undefined : await loadHandler(point.handlerPath)
  const module = await loadTransformModule(modulePath, { perState: true })
  const sourceStates: readonly StateDefinition[] = module.sourceStates ?? handler?.states ?? module.states

  return withSnapshotStore(url, values.region, io, async (snapshotStore) => {
    let log: FileLog | undefined
    const reporter = await transformReporter(io)
    try {
      if (point !== undefined) log = await openLogForReading(point.logDir)
      const options: TransformStateOptions = {
        snapshotStore,
        from: {
          job: from.job, partition: from.partition, states: sourceStates,
          ...(snapshot === undefined ? {} : { snapshot }),
          ...(point === undefined ? {} : {
            offset: point.offset,
            replay: { log: log!, topic: point.topic, handler: handler!.handler, ...(handler!.codec === undefined ? {} : { codec: handler!.codec }) },
          }),
        },
        to: { job: to.job, partition: to.partition, ...(values.replace === true ? { replace: true } : {}) },
        states: module.states,
        ...(module.transform === undefined ? {} : { transform: module.transform }),
        ...(module.perState === undefined ? {} : { perState: module.perState }),
        ...(values['drop-unlisted'] === true ? { unlisted: 'drop' as const } : {}),
        batchSize,
        onProgress: (p) => reporter.onProgress(p),
      }
      const result = await withTempDir('tidemark-transform-', (workDir) => transformState({ ...options, workDir }))
        .catch(async (err: unknown) => { throw await explainNotFound(err, snapshotStore, url, from) })
      reporter.stop()
      await printResult(io, result)
      return EXIT.ok
    } finally {
      reporter.stop()
      await log?.close()
    }
  })
}
