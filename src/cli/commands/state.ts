import { join } from 'node:path'
import { restoreToPoint } from '../../runtime/point-in-time.js'
import { listManifests } from '../../snapshot/catalog.js'
import { restoreSnapshot } from '../../snapshot/restore/index.js'
import type { PartitionStore } from '../../store/partition-store.js'
import type { StateDefinition } from '../../store/state.js'
import {
  bigintOf, EXIT, group, help, json, layoutOf, need, noMore, PARTITION_OPTIONS, parse, pathArg, snapshotIdArg, snapshotStoreArg, URL_ARG, UsageError, withSnapshotStore, writeLine, type CliIO,
} from '../context.js'
import { withTempDir } from '../cleanup.js'
import { explainNotFound, holdingsHint } from '../holdings.js'
import { openLogForReading } from '../../log/existing.js'
import { progressReporter } from '../progress.js'
import { withOpenStore, withReadOnlyStore } from '../read-only-store.js'
import { readState, type StateRecord } from '../state-reader.js'
import { loadHandler } from '../user-module.js'
import { migrate, MIGRATE_USAGE } from './state-migrate.js'
import { drop, DROP_USAGE } from './state-drop.js'
import { transform, TRANSFORM_USAGE } from './state-transform.js'
import { bootstrap, BOOTSTRAP_USAGE } from './state-bootstrap.js'

const USAGE = `usage:
  tidemark state get <source> <KEY> --state NAME [--sub-key S]
      one entry as a JSON line (a map state's key without --sub-key: every
      sub-key of it, one line each); exit 1 when there is none
  tidemark state dump <source> [--state NAME] [--prefix P]
      every entry (of one state; whose key starts with P) as JSON lines:
      {"state","key","value"} (map states: and "subKey"); keys that are not
      UTF-8 come as keyBase64, values that are not JSON as valueBase64

  <source> is one of:
    <store-dir>
        a partition store directory, read from a copy in a temporary
        directory: nothing there is created or changed, and a store that a
        running process has open can be read
    <snapshot-store-url> --job J --partition P [--snapshot ID] [--region R]
        a snapshot (the newest usable one, or ID), restored into a temporary
        directory that is removed afterwards
    <snapshot-store-url> --job J --partition P --offset N --log DIR --topic T --handler MODULE
        the state as of offset N: the newest snapshot at or before N restored
        into a temporary directory, then the file log at DIR replayed up to N
        through the handler (point-in-time restore). MODULE is a JavaScript
        module that exports { handler, states } (and codec, if the events are
        not JSON), as the partition processor is given them`

const SOURCE_OPTIONS = {
  ...PARTITION_OPTIONS,
  snapshot: { type: 'string' }, offset: { type: 'string' }, log: { type: 'string' }, topic: { type: 'string' }, handler: { type: 'string' },
} as const

type SourceValues = { [K in keyof typeof SOURCE_OPTIONS]?: string | undefined }

/**
 * Opens the source of a state command and runs fn on it. A store directory
 * is read from a copy (read-only-store.ts); a snapshot is restored (and replayed) into a
 * temporary directory, removed afterwards: nothing is created at the source.
 */
async function withSource<T>(source: string, values: SourceValues, io: CliIO, fn: (store: PartitionStore) => Promise<T>): Promise<T> {
  // A path with --job or --partition is a snapshot store's directory; without them, a partition store's.
  if (!URL_ARG.test(source) && values.job === undefined && values.partition === undefined) {
    for (const name of Object.keys(SOURCE_OPTIONS)) {
      if (values[name as keyof SourceValues] !== undefined) throw new UsageError(`--${name} is for a snapshot store source (with --job and --partition), not a store directory`)
    }
    return withReadOnlyStore(pathArg(source, '<source>'), fn)
  }
  const url = snapshotStoreArg(source, '<source>')

  const pointInTime = values.offset !== undefined
  // --topic is the file log's topic of a point-in-time read, and no part of the partition's name.
  const layout = layoutOf(pointInTime ? { job: values.job, partition: values.partition } : values)
  if (pointInTime && !/^\d+$/.test(layout.partition)) {
    throw new UsageError(`--offset replays an embedded file log (--log) into a PartitionProcessor job's partition, a number; ${layout.partition} is a consumer group's partition, whose events are in Kafka: read its snapshots (--snapshot ID), or replay it with \`tidemark replay --brokers\``)
  }
  if (pointInTime && values.snapshot !== undefined) throw new UsageError('give either --snapshot or --offset, not both')
  for (const name of ['log', 'topic', 'handler'] as const) {
    if (!pointInTime && values[name] !== undefined) throw new UsageError(`--${name} goes with --offset`)
  }
  let point: { offset: bigint; partition: number; topic: string; logDir: string; handlerPath: string } | undefined
  if (pointInTime) {
    const offset = bigintOf(values.offset!, '--offset')
    point = { offset, partition: Number(layout.partition), topic: need(values.topic, '--topic'), logDir: pathArg(values.log, '--log'), handlerPath: pathArg(values.handler, '--handler') }
  }
  const snapshot = values.snapshot === undefined ? undefined : snapshotIdArg(values.snapshot, '--snapshot')

  return withSnapshotStore(url, values.region, io, async (snapshotStore) => {
    const handler = point === undefined ? undefined : await loadHandler(point.handlerPath)
    return withTempDir('tidemark-state-', async (temp) => {
      const path = join(temp, 'store')
      let states: readonly StateDefinition[] = []
      if (point !== undefined) {
        const log = await openLogForReading(point.logDir)
        const progress = await progressReporter(io, 'replay', 'events')
        try {
          states = handler!.states
          const result = await restoreToPoint({
            job: layout.job, topic: point.topic, partition: point.partition, log, states, handler: handler!.handler,
            ...(handler!.codec === undefined ? {} : { codec: handler!.codec }),
            snapshotStore, target: { offset: point.offset }, path,
            onProgress: (p) => { if (p.phase === 'replay') progress.update(p.done, p.total) },
          })
          for (const s of result.skipped) progress.note(`skipped ${s.id}: ${s.reason}`)
          progress.note(`state of ${point.topic}/${point.partition} as of offset ${point.offset}: ${result.snapshot === undefined ? 'no snapshot' : `snapshot ${result.snapshot}`}, ${result.replayed} events replayed`)
          // From the log's start: right for a young partition, a typo of --job or --partition otherwise.
          if (result.snapshot === undefined && (await listManifests(snapshotStore, layout)).length === 0) progress.note(`no snapshots of ${layout.job}/${layout.partition}: ${await holdingsHint(snapshotStore, url, layout)}`)
        } finally {
          progress.stop()
          await log.close()
        }
      } else {
        const progress = await progressReporter(io, 'restore', 'bytes')
        try {
          await restoreSnapshot({
            snapshotStore, job: layout.job, partition: layout.partition, target: path, useLocal: false,
            ...(snapshot === undefined ? {} : { snapshot }),
            onProgress: (p) => progress.update(p.bytesDownloaded, p.bytesTotal),
            onEvent: (e) => { if (e.type === 'snapshot-skipped') progress.note(`skipped ${e.skipped.id}: ${e.skipped.message}`) },
          }).catch(async (err: unknown) => { throw await explainNotFound(err, snapshotStore, url, layout) })
        } finally {
          progress.stop()
        }
      }
      return await withOpenStore(path, states, fn)
    })
  })
}

function line(io: CliIO, record: StateRecord): Promise<void> {
  return writeLine(io, json(record, 'line'))
}

async function get(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, { ...SOURCE_OPTIONS, state: { type: 'string' }, 'sub-key': { type: 'string' }, json: { type: 'boolean' } })
  if (parsed === undefined) return help(io, USAGE)
  const { positionals: [sourceArg, keyArg, ...extra], values } = parsed
  const source = need(sourceArg, '<source>')
  const key = need(keyArg, '<KEY>')
  noMore(extra)
  const state = need(values.state, '--state')
  const subKey = values['sub-key']
  let found = 0
  await withSource(source, values, io, async (store) => {
    for await (const record of readState(store, { state, key: Buffer.from(key), ...(subKey === undefined ? {} : { subKey: Buffer.from(subKey) }) })) {
      await line(io, record)
      found++
    }
  })
  if (found > 0) return EXIT.ok
  io.stderr.write(`tidemark: state ${JSON.stringify(state)} has no key ${JSON.stringify(key)}${subKey === undefined ? '' : ` with sub-key ${JSON.stringify(subKey)}`}\n`)
  return EXIT.failed
}

async function dump(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, { ...SOURCE_OPTIONS, state: { type: 'string' }, prefix: { type: 'string' }, json: { type: 'boolean' } })
  if (parsed === undefined) return help(io, USAGE)
  const { positionals: [sourceArg, ...extra], values } = parsed
  const source = need(sourceArg, '<source>')
  noMore(extra)
  const state = values.state === undefined ? undefined : need(values.state, '--state')
  await withSource(source, values, io, async (store) => {
    for await (const record of readState(store, {
      ...(state === undefined ? {} : { state }),
      ...(values.prefix === undefined ? {} : { prefix: Buffer.from(values.prefix) }),
    })) await line(io, record)
  })
  return EXIT.ok
}

const strip = (usage: string): string => usage.replace(/^usage:\n/, '')
export const state = group('state', `${USAGE}\n${strip(MIGRATE_USAGE)}\n${strip(DROP_USAGE)}\n${strip(TRANSFORM_USAGE)}\n${strip(BOOTSTRAP_USAGE)}`, { get, dump, migrate, drop, transform, bootstrap })
