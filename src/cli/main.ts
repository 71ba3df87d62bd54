#!/usr/bin/env node
/**
 * `tidemark`: operator commands for partition stores, snapshots and the
 * embedded file log. Data goes to stdout (text, or JSON with --json);
 * progress and errors go to stderr. Exit codes: 0 success; 1 the command
 * failed (a TidemarkError, printed as `tidemark: CODE: message`, any other
 * error by its message, a snapshot that failed verification, a key that is
 * not there); 2 a usage error (bad command, option or argument), printed
 * with the command's usage. No command creates or changes anything it only
 * reads. Commands live in commands/, one file per group, listed in registry.ts.
 */
import { readFileSync, realpathSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { isTidemarkError } from '../errors.js'
import { EXIT, OutputClosed, UsageError, type CliIO, type Command } from './context.js'
import { COMMANDS, findCommand } from './registry.js'
import { didYouMean } from './suggest.js'

export type { CliIO } from './context.js'
/** The name of main()'s second parameter before the commands were split. */
export type CliOutput = CliIO

function usage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length))
  return `usage:
  tidemark <command> [arguments] [options]
  tidemark <command> --help        the command's usage
  tidemark --version

commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join('\n')}

exit codes: 0 success; 1 the command failed (errors on stderr); 2 a usage error.
snapshot stores: a directory path (relative to the working directory), file:///abs/path,
or s3://bucket/prefix?endpoint=http://127.0.0.1:9000
(s3: --region, else the URL's region parameter, AWS_REGION, AWS_DEFAULT_REGION, us-east-1;
credentials from the standard AWS chain, e.g. AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)`
}

/** The version in the package's package.json: two directories up from src/cli/ and three from dist/src/cli/. */
export function version(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)), i = 0; i < 4; dir = dirname(dir), i++) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string }
      if (pkg.name === 'tidemark' && typeof pkg.version === 'string') return pkg.version
    } catch {
      // Not here: one directory up.
    }
  }
  return 'unknown'
}

function describeError(err: unknown): string {
  if (isTidemarkError(err)) return `${err.code}: ${err.message}`
  return err instanceof Error ? err.message : String(err)
}

/** The first write error (other than a closed pipe) of each stream watchOutput watches; main() may run more than once in a process. */
const failures = new WeakMap<object, { error?: Error }>()

/**
 * Keeps a write error of stdout or stderr from ending the process as an
 * uncaught 'error' event: EPIPE (the reader went away, `| head`) is how a
 * pipeline ends, and writeLine stops a command that still writes. Returns
 * the first other error of the stream, for main() to report.
 */
function watchOutput(stream: CliIO['stdout']): () => Error | undefined {
  const s = stream as CliIO['stdout'] & { on?: (event: 'error', listener: (err: NodeJS.ErrnoException) => void) => unknown }
  if (typeof s.on !== 'function') return () => undefined
  let state = failures.get(s)
  if (state === undefined) {
    const fresh: { error?: Error } = {}
    failures.set(s, (state = fresh))
    s.on('error', (err) => {
      // ERR_STREAM_DESTROYED: a write after the EPIPE that destroyed the stream.
      if (err.code !== 'EPIPE' && err.code !== 'ERR_STREAM_DESTROYED') fresh.error ??= err
    })
  }
  const watchedState = state
  return () => watchedState.error
}

/** Runs one command line and returns the exit code; it never throws. */
export async function main(argv: string[], io: CliIO = process): Promise<number> {
  const [name, ...rest] = argv
  let command: Command | undefined
  const stdoutFailure = watchOutput(io.stdout)
  watchOutput(io.stderr)
  try {
    if (name === undefined) {
      // No arguments at all is a request for the usage, not a mistake to name.
      io.stderr.write(`${usage()}\n`)
      return EXIT.usage
    }
    if (name === '--help' || name === '-h') {
      io.stdout.write(`${usage()}\n`)
      return EXIT.ok
    }
    if (name === '--version' || name === '-V') {
      if (rest.length > 0) throw new UsageError(`--version takes no arguments, got ${JSON.stringify(rest[0])}`)
      io.stdout.write(`${version()}\n`)
      return EXIT.ok
    }
    if (name.startsWith('-')) throw new UsageError(`unknown option ${JSON.stringify(name)} before the command`)
    const entry = findCommand(name)
    if (entry === undefined) throw new UsageError(`unknown command ${JSON.stringify(name)}${didYouMean(name, COMMANDS.map((c) => c.name))}`)
    command = await entry.load()
    return await command.run(rest, io)
  } catch (err) {
    if (err instanceof OutputClosed) {
      const failure = stdoutFailure()
      if (failure === undefined) return EXIT.ok
      io.stderr.write(`tidemark: cannot write to stdout: ${failure.message}\n`)
      return EXIT.failed
    }
    if (err instanceof UsageError) {
      io.stderr.write(`tidemark: ${err.message}\n${command?.usage ?? usage()}\n`)
      return EXIT.usage
    }
    io.stderr.write(`tidemark: ${describeError(err)}\n`)
    return EXIT.failed
  }
}

// Run when executed (the bin), not when imported by a test.
if (process.argv[1] !== undefined && pathToFileURL(realpathSync(process.argv[1])).href === import.meta.url) {
  const code = await main(process.argv.slice(2))
  // Then exit at once, not when the event loop runs dry: that exit first
  // closes every handle, signal listeners too, and a SIGTERM in the tear-down
  // after ends the process by the signal, without the command's exit code.
  // (A handler module's open socket or timer would also keep it running.)
  for (const stream of [process.stdout, process.stderr]) {
    if (stream.writableLength > 0) await new Promise((resolve) => stream.write('', resolve))
  }
  process.exit(code)
}
