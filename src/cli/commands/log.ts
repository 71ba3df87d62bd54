import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { openFileLog } from '../../log/file-log/index.js'
import { checkFileLogExists, openLogForReading, SEGMENT_NAME } from '../../log/existing.js'
import { bigintOf, EXIT, group, help, int, json, JSON_OPTION, noMore, parse, pathArg, print, UsageError, writeLine, type CliIO } from '../context.js'

const USAGE = `usage:
  tidemark log info <log-dir> [--json]
      the embedded file log's oldest revision, tail, entry count and size
  tidemark log tail <log-dir> [-n N] [--from REV] [--json]
      the last N entries (default 10), or N entries from revision REV (every
      entry up to the tail when -n is not given); one line each: the revision
      and the entry as text (base64: when it is not UTF-8); with --json one
      JSON line each: {"revision","value"} for a JSON entry, "text" or
      "base64" otherwise
  tidemark log append <log-dir> [DATA...] [--create] [--json]
      appends each DATA as one entry (UTF-8), or each non-empty line of stdin
      when no DATA is given; prints the revisions. The log must exist unless
      --create

info and tail open the log read-only: no lock is taken, nothing is created
or repaired, and a running writer is not disturbed.`

function entryJson(revision: bigint, data: Uint8Array): Record<string, unknown> {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength)
  let text: string | undefined
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(buf)
  } catch {
    return { revision, base64: buf.toString('base64') }
  }
  try {
    return { revision, value: JSON.parse(text) as unknown }
  } catch {
    return { revision, text }
  }
}

async function info(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, JSON_OPTION)
  if (parsed === undefined) return help(io, USAGE)
  const { positionals: [arg, ...extra], values } = parsed
  const dir = pathArg(arg, '<log-dir>')
  noMore(extra)
  const log = await openLogForReading(dir)
  let result
  try {
    const [oldest, tail] = [await log.oldest(), await log.tail()]
    const segments = (await readdir(dir)).filter((n) => SEGMENT_NAME.test(n))
    let bytes = 0
    for (const name of segments) bytes += (await stat(join(dir, name))).size
    result = { dir, oldest, tail, entries: tail - oldest, segments: segments.length, bytes }
  } finally {
    await log.close()
  }
  print(io, values.json, result, () => [
    `log       ${result.dir}`,
    `entries   ${result.entries} (revisions ${result.oldest} to ${result.tail - 1n}; the next append gets ${result.tail})`,
    `segments  ${result.segments}, ${result.bytes} bytes`,
  ].join('\n'))
  return EXIT.ok
}

async function tail(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, { ...JSON_OPTION, lines: { type: 'string', short: 'n' }, from: { type: 'string' } })
  if (parsed === undefined) return help(io, USAGE)
  const { positionals: [arg, ...extra], values } = parsed
  const dir = pathArg(arg, '<log-dir>')
  noMore(extra)
  const from = values.from === undefined ? undefined : bigintOf(values.from, '--from')
  const count = int(values.lines, '-n', from === undefined ? 10 : Number.MAX_SAFE_INTEGER, 0)
  const log = await openLogForReading(dir)
  try {
    const [oldest, end] = [await log.oldest(), await log.tail()]
    // Entries of the file log have consecutive revisions: the last N start at tail - N.
    let start = from ?? end - BigInt(Math.min(count, Number(end)))
    if (start < oldest && from === undefined) start = oldest
    let printed = 0
    if (count > 0 && start < end) {
      for await (const entry of log.read(start, { end })) {
        await writeLine(io, values.json === true ? json(entryJson(entry.revision, entry.data), 'line') : entryText(entry.revision, entry.data))
        if (++printed >= count) break
      }
    }
  } finally {
    await log.close()
  }
  return EXIT.ok
}

function entryText(revision: bigint, data: Uint8Array): string {
  const e = entryJson(revision, data)
  const body = 'base64' in e ? `base64:${e.base64 as string}` : 'text' in e ? (e.text as string) : JSON.stringify(e.value)
  return `${revision}\t${body}`
}

async function append(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, { ...JSON_OPTION, create: { type: 'boolean' } })
  if (parsed === undefined) return help(io, USAGE)
  const { positionals: [arg, ...data], values } = parsed
  const dir = pathArg(arg, '<log-dir>')
  // Refused before anything is written: a mistyped path must not become a new log.
  if (values.create !== true) await checkFileLogExists(dir)
  const entries = data.length > 0 ? data : await stdinLines(io)
  if (entries.length === 0) throw new UsageError('nothing to append: give DATA arguments or lines on stdin')
  const log = await openFileLog(dir)
  const revisions: bigint[] = []
  try {
    // In order, one after the other: the revisions follow the arguments' order.
    for (const entry of entries) revisions.push(await log.append(Buffer.from(entry, 'utf8')))
  } finally {
    await log.close()
  }
  print(io, values.json, { dir, revisions }, () => `appended ${revisions.length} entries to ${dir}: revisions ${revisions[0]} to ${revisions[revisions.length - 1]}`)
  return EXIT.ok
}

async function stdinLines(io: CliIO): Promise<string[]> {
  const input = io.stdin ?? process.stdin
  let text = ''
  for await (const chunk of input) text += typeof chunk === 'string' ? chunk : chunk.toString('utf8')
  return text.split('\n').map((l) => l.replace(/\r$/, '')).filter((l) => l !== '')
}

export const log = group('log', USAGE, { info, tail, append })
