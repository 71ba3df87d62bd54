import { withReadOnlyStore } from '../read-only-store.js'
import { EXIT, help, JSON_OPTION, noMore, parse, pathArg, print, table, type Command } from '../context.js'

const USAGE = `usage:
  tidemark positions <store-dir> [--json]
      the source positions committed in a partition store (read only: a path
      that holds no store fails and is left as it was; a store is read from
      a copy, so nothing in it changes and a running owner is not disturbed)`

export const positions: Command = {
  name: 'positions',
  usage: USAGE,
  async run(argv, io) {
    const parsed = parse(argv, JSON_OPTION)
    if (parsed === undefined) return help(io, USAGE)
    const [arg, ...extra] = parsed.positionals
    const path = pathArg(arg, '<store-dir>')
    noMore(extra)
    // Never opened in place: a mistyped path or a directory that holds
    // something else is refused and left as it was, and a store is read from
    // a copy, since LevelDB writes into every directory it opens.
    const result = await withReadOnlyStore(path, async (store) => ({ path, positions: store.positions() }))
    print(io, parsed.values.json, result, () => result.positions.length === 0
      ? `${result.path}: no positions`
      : table(['topic', 'partition', 'offset'], result.positions.map((p) => [p.topic, String(p.partition), String(p.offset)])))
    return EXIT.ok
  },
}
