/**
 * `npm run bench -- NAME [args]` runs bench/NAME.ts, whose run(args) prints one
 * JSON object per result on stdout. Benchmarks are not part of `npm test`.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
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
// The group benches run up to four members in this process, where they
// share one libuv thread pool (4 threads: LevelDB, fs, fsync, hashing). As
// the separate processes they stand for, each would have its own. They run
// again with a pool of 4 per member, set before the pool first starts.
const POOL_THREADS: Record<string, number> = { scaleout: 16, failover: 16, rolling: 16 }
const threads = POOL_THREADS[name]
if (threads !== undefined && process.env.UV_THREADPOOL_SIZE === undefined) {
  const child = spawn(process.execPath, [...process.execArgv, ...process.argv.slice(1)], { stdio: 'inherit', env: { ...process.env, UV_THREADPOOL_SIZE: String(threads) } })
  const [code, signal] = await once(child, 'exit') as [number | null, NodeJS.Signals | null]
  process.exit(code ?? (signal === null ? 1 : 128))
}
const mod = (await import(pathToFileURL(join(here, `${name}.ts`)).href)) as { run(args: string[]): Promise<void> }
await mod.run(args)
// The result lines are out: a client that leaves a handle open (the group
// benches' kafkajs members) must not keep the run from ending.
setTimeout(() => {
  process.stderr.write(`bench ${name}: handles still open 5 s after the result; exiting\n`)
  process.exit(0)
}, 5000).unref()
