import type { CliIO, Command } from '../context.js'

/**
 * `tidemark replay` is src/replay/'s (issue 9's replay jobs): this entry
 * only loads that module when the command runs, so the other commands never
 * load the replay code.
 */
interface ReplayCli {
  runReplayCommand(argv: string[], io: CliIO): Promise<number>
}

// A variable specifier: the replay module is written beside this one, and
// the CLI must build (and its other commands run) without it.
const REPLAY_CLI = '../../replay/cli.js'

async function load(): Promise<ReplayCli> {
  try {
    return (await import(REPLAY_CLI)) as ReplayCli
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND' && String((err as Error).message).includes('replay/cli')) {
      throw new Error('tidemark replay is not part of this build (src/replay/cli.ts is missing)', { cause: err })
    }
    throw err
  }
}

export const replay: Command = {
  name: 'replay',
  summary: 'runs a replay job over a fixed offset range into a new job (tidemark replay --help)',
  usage: 'usage:\n  tidemark replay --help\n      the replay job\'s own usage',
  async run(argv, io) {
    return (await load()).runReplayCommand(argv, io)
  },
}
