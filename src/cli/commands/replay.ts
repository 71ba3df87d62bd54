import { REPLAY_USAGE, runReplayCommand } from '../../replay/cli.js'
import type { Command } from '../context.js'

/**
 * `tidemark replay` is src/replay/'s (replay jobs): its module parses its own
 * options and reports its own usage mistakes (exit 2) and failures (exit 1).
 * The registry loads this module only when the command runs, so the other
 * commands never load the replay and outputs code.
 */
export const replay: Command = {
  name: 'replay',
  usage: REPLAY_USAGE,
  run: (argv, io) => runReplayCommand(argv, io),
}
