// The command language of the SharedConfig CLI: a command word, then
// comma-separated arguments, as in Pravega's SharedConfigCli.

export type Command =
  | { name: 'GET_ALL' }
  | { name: 'GET'; key: string }
  | { name: 'PUT'; key: string; value: string }
  | { name: 'PUT_IF_ABSENT'; key: string; value: string }
  | { name: 'REMOVE'; key: string; currentValue?: string }
  | { name: 'REPLACE'; key: string; newValue: string; currentValue?: string }
  | { name: 'CLEAR' }
  | { name: 'REFRESH' }
  | { name: 'HELP' }
  | { name: 'QUIT' }

export const HELP = [
  'GET_ALL                               print every property',
  'GET key                               print one property',
  'PUT key, value                        set a property; prints the old value',
  'PUT_IF_ABSENT key, value              set a property only if it is not set',
  'REMOVE key [, currentValue]           remove a property (only while it has currentValue)',
  'REPLACE key, newValue [, currentValue]  change a set property (only while it has currentValue)',
  'CLEAR                                 remove every property',
  'REFRESH                               fetch the changes of the other processes',
  'HELP                                  print this list',
  'QUIT                                  leave',
]

/** The arity of each command: how many arguments it needs, and how many it takes at most. */
const ARGS: Record<Command['name'], { min: number; max: number; usage: string }> = {
  GET_ALL: { min: 0, max: 0, usage: 'GET_ALL' },
  GET: { min: 1, max: 1, usage: 'GET key' },
  PUT: { min: 2, max: 2, usage: 'PUT key, value' },
  PUT_IF_ABSENT: { min: 2, max: 2, usage: 'PUT_IF_ABSENT key, value' },
  REMOVE: { min: 1, max: 2, usage: 'REMOVE key [, currentValue]' },
  REPLACE: { min: 2, max: 3, usage: 'REPLACE key, newValue [, currentValue]' },
  CLEAR: { min: 0, max: 0, usage: 'CLEAR' },
  REFRESH: { min: 0, max: 0, usage: 'REFRESH' },
  HELP: { min: 0, max: 0, usage: 'HELP' },
  QUIT: { min: 0, max: 0, usage: 'QUIT' },
}

export class CommandError extends Error {
  override name = 'CommandError'
}

/** Parses one input line; a blank line is undefined. Fails with a one-line CommandError. */
export function parseCommand(line: string): Command | undefined {
  const trimmed = line.trim()
  if (trimmed === '') return undefined
  const space = trimmed.search(/\s/)
  const word = (space === -1 ? trimmed : trimmed.slice(0, space)).toUpperCase()
  const rest = space === -1 ? '' : trimmed.slice(space).trim()
  if (!Object.hasOwn(ARGS, word)) throw new CommandError(`unknown command '${word}' (HELP lists the commands)`)
  const name = word as Command['name']
  const { min, max, usage } = ARGS[name]
  const args = rest === '' ? [] : rest.split(',').map((a) => a.trim())
  if (args.length < min || args.length > max) {
    throw new CommandError(`${name} takes ${max === 0 ? 'no arguments' : usage.slice(name.length + 1)}, got ${args.length === 0 ? 'none' : `'${rest}'`}`)
  }
  if (args.some((a) => a === '')) throw new CommandError(`${usage}: an argument is empty in '${rest}'`)
  const [a, b, c] = args as [string, string, string]
  switch (name) {
    case 'GET':
      return { name, key: a }
    case 'PUT':
    case 'PUT_IF_ABSENT':
      return { name, key: a, value: b }
    case 'REMOVE':
      return args.length === 2 ? { name, key: a, currentValue: b } : { name, key: a }
    case 'REPLACE':
      return args.length === 3 ? { name, key: a, newValue: b, currentValue: c } : { name, key: a, newValue: b }
    default:
      return { name } as Command
  }
}
