// The SharedConfig command-line program: start it twice on the same log and
// watch the two processes agree. Usage:
//
//   npx tsx examples/shared-config/main.ts [--name NAME] [--dir DIR]
//   npx tsx examples/shared-config/main.ts --kafka HOST:PORT[,HOST:PORT] [--topic TOPIC] [--dir DIR] [--fetch-wait-ms MS]
//
// The log is the embedded file log in DIR/log (default .tidemark/shared-config/NAME),
// or partition 0 of TOPIC on Kafka with --kafka. Compact points go to DIR/snapshots.
import { resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'
import { openKafkaLog } from '../../connectors/kafka/index.js'
import { FsSnapshotStore, openFileLog, type RevisionedLog } from '../../src/index.js'
import { CommandError, parseCommand } from './commands.js'
import { execute } from './execute.js'
import { SharedConfig } from './shared-config.js'

const USAGE = 'usage: main.ts [--name NAME] [--dir DIR] [--kafka HOST:PORT[,HOST:PORT...] [--topic TOPIC] [--fetch-wait-ms MS]]'

let flags
try {
  flags = parseArgs({
    options: {
      name: { type: 'string', default: 'default' },
      dir: { type: 'string' },
      kafka: { type: 'string' },
      topic: { type: 'string' },
      // librdkafka's mock answers a waiting fetch only when its wait is over.
      'fetch-wait-ms': { type: 'string' },
    },
    strict: true,
  }).values
} catch (err) {
  console.error(`${(err as Error).message}\n${USAGE}`)
  process.exit(2)
}
if (!/^[a-zA-Z0-9._-]+$/.test(flags.name)) {
  console.error(`--name must be letters, digits, '.', '_' or '-', got '${flags.name}'\n${USAGE}`)
  process.exit(2)
}

const dir = resolve(flags.dir ?? `.tidemark/shared-config/${flags.name}`)
let log: RevisionedLog
try {
  log = flags.kafka === undefined
    ? await openFileLog(resolve(dir, 'log'))
    : await openKafkaLog({
        brokers: flags.kafka.split(','),
        topic: flags.topic ?? `tidemark-shared-config-${flags.name}`,
        ...(flags['fetch-wait-ms'] === undefined ? {} : { fetchWaitMs: Number(flags['fetch-wait-ms']) }),
      })
} catch (err) {
  console.error(`could not open the log: ${(err as Error).message}`)
  process.exit(1)
}
const store = new FsSnapshotStore({ root: resolve(dir, 'snapshots') })
const config = await SharedConfig.open({ log, compactPoints: { store, prefix: `shared-config/${flags.name}/` } })

const interactive = process.stdin.isTTY === true
const prompt = (): void => {
  if (interactive) process.stdout.write('> ')
}
console.log(`SharedConfig '${flags.name}' on ${(log as { location?: string }).location}. HELP lists the commands.`)
prompt()

for await (const line of createInterface({ input: process.stdin, terminal: false })) {
  let quit = false
  try {
    const command = parseCommand(line)
    if (command !== undefined) {
      for (const out of await execute(config, command)) console.log(out)
      quit = command.name === 'QUIT'
    }
  } catch (err) {
    // One line, and the prompt back: a typo must not end the session.
    console.log(`error: ${err instanceof CommandError ? err.message : (err as Error).message.split('\n')[0]}`)
  }
  if (quit) break
  prompt()
}
// QUIT leaves stdin open (it may be a terminal or a pipe still connected).
process.stdin.destroy()
await config.close()
await log.close()
await store.close()
