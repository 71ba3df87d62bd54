/**
 * `npm run bench -- NAME [args]` runs bench/NAME.ts, whose run(args) prints one
 * JSON object per result on stdout. Benchmarks are not part of `npm test`.
 */
import { readdirSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import { dirname, join } from 'node:path'

const here = dirname(new URL(import.meta.url).pathname)
const available = readdirSync(here).filter((f) => f.endsWith('.ts') && f !== 'run.ts' && !f.startsWith('_')).map((f) => f.slice(0, -3))
const [name, ...args] = process.argv.slice(2)
if (name === undefined || !available.includes(name)) {
  console.error(`usage: npm run bench -- NAME [args]\nbenchmarks: ${available.join(', ')}`)
  process.exit(2)
}
const mod = (await import(pathToFileURL(join(here, `${name}.ts`)).href)) as { run(args: string[]): Promise<void> }
await mod.run(args)
// The result lines are out: a client that leaves a handle open (the group
// benches' kafkajs members) must not keep the run from ending.
setTimeout(() => {
  process.stderr.write(`bench ${name}: handles still open 5 s after the result; exiting\n`)
  process.exit(0)
}, 5000).unref()
