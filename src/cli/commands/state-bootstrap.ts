import { access } from 'node:fs/promises'
import { validatePosition, type Position } from '../../store/position.js'
import { bootstrapState, readStateRecords } from '../../transform/index.js'
import { withTempDir } from '../cleanup.js'
import { EXIT, help, int, layoutOf, noMore, parse, pathArg, snapshotStoreArg, UsageError, withSnapshotStore, type CliIO } from '../context.js'
import { printResult, transformReporter } from '../transform-report.js'
import { loadTransformModule } from '../user-module.js'

export const BOOTSTRAP_USAGE = `usage:
  tidemark state bootstrap <snapshot-store-url> --job J --partition P --from FILE --module MODULE
      [--position TOPIC/PARTITION@OFFSET ...] [--replace] [--batch-size N] [--region R]
      writes the records of FILE, JSON lines as \`tidemark state dump\` prints
      them ({"state","key","value"}, "subKey" for map states, keyBase64 and
      valueBase64, and "version" for a versioned state's value), as the
      first snapshot of J's partition P, with the positions given (default
      none: the job starts at the log's beginning): a job started on it
      resumes right after them. MODULE exports { states } (the job's state
      definitions; each record names one), or with transform (entry,
      target) => entries, run on each record, also sourceStates, the states
      the records are of (default states). A partition with snapshots is
      refused unless --replace, which fences its running owner. Progress on
      stderr; one JSON line on stdout, as state transform prints`

/** `tidemark state bootstrap`: bootstrapState (src/transform/) from a JSON lines file. */
export async function bootstrap(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, {
    job: { type: 'string' }, partition: { type: 'string' }, region: { type: 'string' }, topic: { type: 'string' },
    from: { type: 'string' }, module: { type: 'string' }, position: { type: 'string', multiple: true },
    replace: { type: 'boolean' }, 'batch-size': { type: 'string' }, json: { type: 'boolean' },
  })
  if (parsed === undefined) return help(io, BOOTSTRAP_USAGE)
  const { positionals: [urlArg, ...extra], values } = parsed
  const url = snapshotStoreArg(urlArg)
  noMore(extra)
  const layout = layoutOf(values)
  const file = pathArg(values.from, '--from')
  try {
    await access(file)
  } catch (err) {
    throw new UsageError(`--from ${file}: ${(err as Error).message}`, { cause: err })
  }
  const positions = ((values.position ?? []) as string[]).map(positionArg)
  const batchSize = int(values['batch-size'], '--batch-size', 10_000, 1)
  const module = await loadTransformModule(pathArg(values.module, '--module'), { perState: false })

  return withSnapshotStore(url, values.region, io, async (snapshotStore) => {
    const reporter = await transformReporter(io)
    try {
      const result = await withTempDir('tidemark-bootstrap-', (workDir) => bootstrapState({
        snapshotStore,
        to: { job: layout.job, partition: layout.partition, ...(values.replace === true ? { replace: true } : {}) },
        states: module.states,
        records: readStateRecords(file, module.sourceStates ?? module.states),
        positions,
        ...(module.transform === undefined ? {} : { transform: module.transform }),
        batchSize,
        workDir,
        onProgress: (p) => reporter.onProgress(p),
      }))
      reporter.stop()
      await printResult(io, result)
      return EXIT.ok
    } finally {
      reporter.stop()
    }
  })
}

/** TOPIC/PARTITION@OFFSET, as `tidemark positions` prints them. */
function positionArg(text: string): Position {
  const m = /^(.+)\/(\d{1,10})@(\d{1,19})$/.exec(text)
  if (m === null) throw new UsageError(`--position must be TOPIC/PARTITION@OFFSET (sales/0@1234), got ${JSON.stringify(text)}`)
  try {
    return validatePosition({ topic: m[1]!, partition: Number(m[2]), offset: BigInt(m[3]!) }, '--position')
  } catch (err) {
    throw new UsageError((err as Error).message, { cause: err })
  }
}
