/**
 * One writer process of `npm run bench -- sync --only file`: opens the file
 * log in argv[2] (with the options in argv[5], JSON, if given), prints "ready", waits for "go" on stdin, appends argv[3]
 * entries of argv[4] bytes one after another (each awaited, as a
 * synchronizer's writer does), and prints "done".
 */
import { createInterface } from 'node:readline'
import { openFileLog } from '../src/log/index.js'

const [dir, count, bytes, options] = process.argv.slice(2)
const log = await openFileLog(dir!, options === undefined ? {} : (JSON.parse(options) as object))
const entry = Buffer.alloc(Number(bytes), 1)
await log.append(entry)
process.stdout.write('ready\n')
for await (const line of createInterface({ input: process.stdin })) {
  if (line !== 'go') continue
  for (let i = 0; i < Number(count); i++) await log.append(entry)
  process.stdout.write('done\n')
  break
}
await log.close()
