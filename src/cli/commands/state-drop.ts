import { dropState } from '../../store/drop-state.js'
import { EXIT, help, json, need, noMore, parse, pathArg, writeLine, type CliIO } from '../context.js'
import { withOpenStore } from '../read-only-store.js'

export const DROP_USAGE = `usage:
  tidemark state drop <store-dir> --state NAME
      deletes every key of state NAME and its record from the store, in
      place: for a state the program no longer lists, which the store keeps
      until then. The job must not be running on the store
      (TIDEMARK_STORE_LOCKED). Prints {"state","deleted"}`

/** `tidemark state drop`: dropState (src/store/drop-state.ts) on a stopped job's store. */
export async function drop(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, { state: { type: 'string' }, json: { type: 'boolean' } })
  if (parsed === undefined) return help(io, DROP_USAGE)
  const { positionals: [dirArg, ...extra], values } = parsed
  const path = pathArg(dirArg, '<store-dir>')
  noMore(extra)
  const name = need(values.state, '--state')
  // Opened without states: none is declared, so any may be dropped.
  const result = await withOpenStore(path, undefined, (store) => dropState(store, name))
  await writeLine(io, json(result, 'line'))
  return EXIT.ok
}
