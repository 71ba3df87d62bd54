/**
 * What every command shares: where it writes, how a command line is parsed
 * (Node's built-in util.parseArgs, strict), how a usage mistake is told from
 * a failure, and how data is printed (text for people, --json for programs).
 */
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { openSnapshotStore } from '../snapshot-store/open.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { SNAPSHOT_ID, SnapshotLayout } from '../snapshot/layout.js'
import { didYouMean } from './suggest.js'

/** Where main() writes and reads; process by default, captured by tests. */
export interface CliIO {
  stdout: { write(text: string): unknown; isTTY?: boolean }
  stderr: { write(text: string): unknown; isTTY?: boolean; columns?: number }
  /** For `log append` without data arguments. */
  stdin?: AsyncIterable<Buffer | string>
  /** For AWS_REGION and the like; process.env by default. */
  env?: Record<string, string | undefined>
}

/** A mistake in the command line: exit 2, with the command's usage. Only the CLI's own argument handling raises it. */
export class UsageError extends Error {}

/**
 * The reader of stdout went away (`tidemark state dump … | head`): thrown by
 * writeLine so that the command stops and its finally blocks remove what it
 * made; main() ends it quietly with exit 0, as any Unix tool.
 */
export class OutputClosed extends Error {}

/** Exit codes: documented in docs/cli.md and in `tidemark --help`. */
export const EXIT = Object.freeze({ ok: 0, failed: 1, usage: 2 })

/** One command or group of subcommands; its one-line summary is in the registry, so that `tidemark --help` loads no command. */
export interface Command {
  name: string
  /** The text of `tidemark <name> --help`; starts with the line `usage:`. */
  usage: string
  /** Runs with the arguments after the command's name; returns the exit code. */
  run(argv: string[], io: CliIO): Promise<number>
}

export type OptionSpec = NonNullable<ParseArgsConfig['options']>

/** Options every command takes. */
const COMMON = { help: { type: 'boolean', short: 'h' } } as const

/** Options of commands that print data. */
export const JSON_OPTION = { json: { type: 'boolean' } } as const

/** Options of commands that read a partition's snapshots. */
export const PARTITION_OPTIONS = {
  job: { type: 'string' }, partition: { type: 'string' }, region: { type: 'string' },
  // Taken only to be refused with the one name of a consumer group's partition (layoutOf).
  topic: { type: 'string' },
} as const

/**
 * util.parseArgs with the command's options plus --help; any parse failure
 * (an unknown option, a missing value) becomes a UsageError. Returns
 * undefined for --help, which the caller answers with its usage.
 */
export function parse<O extends OptionSpec>(argv: string[], options: O): Parsed<O> | undefined {
  let parsed
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, strict: true, options: { ...options, ...COMMON } as O & typeof COMMON })
  } catch (err) {
    // parseArgs reports unknown options, missing option values and the like
    // as TypeErrors with an ERR_PARSE_ARGS_* code.
    if ((err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS_')) throw new UsageError((err as Error).message, { cause: err })
    throw err
  }
  return (parsed.values as { help?: boolean }).help === true ? undefined : (parsed as unknown as Parsed<O>)
}

/** What parse() returns: each option's value (a string, or true for a flag) or undefined, and the positional arguments. */
export interface Parsed<O extends OptionSpec> {
  values: { [K in keyof O]?: O[K] extends { type: 'boolean' } ? boolean : string }
  positionals: string[]
}

export function need(value: string | undefined, name: string): string {
  if (value === undefined) throw new UsageError(`missing ${name}`)
  if (value === '') throw new UsageError(`${name} must not be empty`)
  return value
}

/** No positional arguments beyond those a command takes. */
export function noMore(extra: readonly string[]): void {
  if (extra.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])}`)
}

/** A path argument, resolved against the working directory: every command takes relative paths. */
export function pathArg(value: string | undefined, name: string): string {
  return resolve(need(value, name))
}

/** A URL (file:, s3:) rather than a path: a scheme of two or more letters. */
export const URL_ARG = /^[a-z][a-z0-9+.-]+:/i

/**
 * A snapshot store argument: a URL (file:///abs/path, s3://bucket/prefix) as
 * given, or a directory path, resolved against the working directory as every
 * path argument is, as its file:// URL.
 */
export function snapshotStoreArg(value: string | undefined, name = '<snapshot-store-url>'): string {
  return storeUrlOf(need(value, name))
}

/** A snapshot store argument that is not empty, as a URL: a path becomes its file:// URL. */
export function storeUrlOf(text: string): string {
  return URL_ARG.test(text) ? text : pathToFileURL(resolve(text)).href
}

/** A snapshot id argument (`0000000001-000000000042`), checked here so that a malformed one is a usage error. */
export function snapshotIdArg(value: string | undefined, name: string): string {
  const id = need(value, name)
  if (!SNAPSHOT_ID.test(id)) throw new UsageError(`${name} must be a snapshot id like 0000000001-000000000042 (as \`tidemark snapshots list\` prints them), got ${JSON.stringify(id)}`)
  return id
}

export function int(value: string | undefined, name: string, fallback: number, min: number): number {
  if (value === undefined) return fallback
  const n = Number(value)
  // Decimal digits only: Number() would also take '0x10', '1e3' and ' 5'.
  if (!/^-?\d+$/.test(value) || !Number.isSafeInteger(n) || n < min) {
    throw new UsageError(`${name} must be ${min === 0 ? 'a non-negative integer' : `an integer of at least ${min}`}, got ${JSON.stringify(value)}`)
  }
  return n
}

/** A non-negative offset or revision (64 bits). */
export function bigintOf(value: string, name: string): bigint {
  if (!/^\d{1,20}$/.test(value) || BigInt(value) > 0xffff_ffff_ffff_ffffn) throw new UsageError(`${name} must be a non-negative integer, got ${JSON.stringify(value)}`)
  return BigInt(value)
}

/**
 * A partition as the snapshot store names it, and as `tidemark jobs` lists
 * it: a PartitionProcessor's partition number (`007` is 7), or a
 * StatefulConsumer's `<topic>-<partition>` (connectors/kafka/consumer's
 * partitionKey: `orders-3`; `orders-03` is that too), the topic a legal
 * Kafka topic name. Anything else, a path segment (`../x`) among them, is a
 * usage error.
 */
export function partitionArg(value: string | undefined, name = '--partition'): string {
  const text = need(value, name)
  const named = partitionName(text)
  if (named === undefined) throw new UsageError(`${name} must be a partition as \`tidemark jobs\` lists it: a number (0), or a consumer group's <topic>-<partition> (orders-3), got ${JSON.stringify(text)}`)
  return named
}

function partitionName(text: string): string | undefined {
  if (/^\d+$/.test(text)) return Number.isSafeInteger(Number(text)) ? String(Number(text)) : undefined
  const keyed = /^([A-Za-z0-9._-]{1,249})-(\d+)$/.exec(text)
  if (keyed === null || keyed[1] === '.' || keyed[1] === '..' || !Number.isSafeInteger(Number(keyed[2]))) return undefined
  return `${keyed[1]}-${Number(keyed[2])}`
}

/**
 * The layout of --job and --partition; checked before anything is opened, so
 * a bad name is a usage error. A consumer group's partition has one name,
 * `--partition orders-3`, as in the store, the claim and `tidemark jobs`:
 * --topic next to it is refused with that name (where a command takes
 * --topic, for a source log, the caller leaves it out of `values`).
 */
export function layoutOf(values: { job?: string | undefined; partition?: string | undefined; topic?: string | undefined }): SnapshotLayout {
  const job = need(values.job, '--job')
  const partition = partitionArg(values.partition)
  if (values.topic !== undefined) {
    const joined = /^\d+$/.test(partition) ? partitionName(`${values.topic}-${partition}`) : undefined
    throw new UsageError(joined !== undefined
      ? `--topic ${JSON.stringify(values.topic)} --partition ${partition}: a consumer group's partition is named as \`tidemark jobs\` lists it, in one option: --partition ${joined}`
      : `--topic is not an option here: a consumer group's partition is named as \`tidemark jobs\` lists it, in one option (--partition orders-3)`)
  }
  try {
    return new SnapshotLayout(job, partition)
  } catch (err) {
    throw new UsageError(`--job ${JSON.stringify(job)} --partition ${JSON.stringify(partition)}: ${(err as Error).message}`, { cause: err })
  }
}

/**
 * The region of an s3:// store: --region, else the URL's region parameter,
 * else AWS_REGION or AWS_DEFAULT_REGION, else us-east-1. The AWS SDK has no
 * default and fails every request with "Region is missing"; S3-compatible
 * servers (MinIO, radosgw) accept any region, and us-east-1 is S3's own.
 */
export function s3Region(url: string, region: string | undefined, env: Record<string, string | undefined>): string | undefined {
  if (region !== undefined) return need(region, '--region')
  if (!url.startsWith('s3:')) return undefined
  let fromUrl: string | null = null
  try {
    fromUrl = new URL(url).searchParams.get('region')
  } catch {
    return undefined // openSnapshotStore names the bad URL
  }
  if (fromUrl !== null) return undefined
  return env.AWS_REGION || env.AWS_DEFAULT_REGION || 'us-east-1'
}

/**
 * Opens the snapshot store named by a command's URL argument for the duration
 * of fn. mustExist: every command here reads, and a mistyped path must fail
 * rather than list nothing. openSnapshotStore throws TypeError and RangeError
 * only for the URL itself, which is a command-line argument here.
 */
export async function withSnapshotStore<T>(url: string, region: string | undefined, io: CliIO, fn: (store: SnapshotStore) => Promise<T>): Promise<T> {
  let store: SnapshotStore
  const resolved = s3Region(url, region, io.env ?? process.env)
  try {
    store = await openSnapshotStore(url, { mustExist: true, ...(resolved === undefined ? {} : { s3: { region: resolved } }) })
  } catch (err) {
    if (err instanceof TypeError || err instanceof RangeError) throw new UsageError(err.message, { cause: err })
    throw err
  }
  try {
    return await fn(store)
  } finally {
    await store.close()
  }
}

/** JSON with bigints (offsets) as strings; indented, or on one line (JSON lines). */
export function json(value: unknown, layout: 'indented' | 'line' = 'indented'): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), layout === 'line' ? undefined : 2)
}

/**
 * Writes one line of a stream of records (state dump, log tail), waiting
 * when a pipe is full: a dump of millions of entries must not pile up in
 * memory in front of a slow reader.
 */
export async function writeLine(io: CliIO, text: string): Promise<void> {
  const out = io.stdout as CliIO['stdout'] & Partial<Pick<NodeJS.WriteStream, 'once' | 'off' | 'destroyed'>>
  // A pipe whose reader exited is destroyed after its first failed write (EPIPE).
  if (out.destroyed === true) throw new OutputClosed('stdout was closed')
  if (out.write(`${text}\n`) === false && typeof out.once === 'function' && typeof out.off === 'function') {
    await new Promise<void>((resolve, reject) => {
      const drained = (): void => {
        out.off!('close', closed)
        resolve()
      }
      const closed = (): void => {
        out.off!('drain', drained)
        reject(new OutputClosed('stdout was closed'))
      }
      out.once!('drain', drained)
      out.once!('close', closed)
    })
  }
}

/** Prints data: JSON with --json, else the text for people. */
export function print(io: CliIO, asJson: boolean | undefined, value: unknown, text: () => string): void {
  io.stdout.write(asJson === true ? `${json(value)}\n` : `${text()}\n`)
}

/** Rows as aligned columns under a header. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)))
  const line = (cells: readonly string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')
  return [line(header), ...rows.map(line)].join('\n')
}

export function positionsText(positions: readonly { topic: string; partition: number; offset: bigint }[]): string {
  return positions.length === 0 ? '-' : positions.map((p) => `${p.topic}/${p.partition}@${p.offset}`).join(' ')
}

/**
 * A group of subcommands (`snapshots list`, `state get`): the first
 * argument names the subcommand; `<group> --help` prints the group's usage,
 * and so does --help after a subcommand.
 */
export function group(name: string, usage: string, subcommands: Record<string, (argv: string[], io: CliIO) => Promise<number>>): Command {
  return {
    name,
    usage,
    async run(argv, io) {
      const [sub, ...rest] = argv
      if (sub === undefined || sub.startsWith('-')) {
        if (sub === '--help' || sub === '-h') return help(io, usage)
        throw new UsageError(`missing subcommand: ${Object.keys(subcommands).join(', ')}`)
      }
      const run = Object.hasOwn(subcommands, sub) ? subcommands[sub] : undefined
      if (run === undefined) throw new UsageError(`unknown ${name} subcommand ${JSON.stringify(sub)}${didYouMean(sub, Object.keys(subcommands))}; expected ${Object.keys(subcommands).join(', ')}`)
      return run(rest, io)
    },
  }
}

export function help(io: CliIO, usage: string): number {
  io.stdout.write(`${usage}\n`)
  return EXIT.ok
}
