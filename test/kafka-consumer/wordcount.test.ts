import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { expect, it, onTestFinished } from 'vitest'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'

const example = join(import.meta.dirname, '../../examples/wordcount/main.ts')

it('examples/wordcount: one command, and SIGTERM hands every partition off with a snapshot before it exits 0', async () => {
  const dir = tempDir()
  const args = ['--brokers', kafkaService().brokers.join(','), '--topic', randomName('wc-lines'), '--job', randomName('wc'), '--state', join(dir, 'state'), '--store', `file://${join(dir, 'snapshots')}`, '--produce', '2000']
  const child = spawn(process.execPath, ['--import', 'tsx', example, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  onTestFinished(() => {
    child.kill('SIGKILL')
  })
  const lines: string[] = []
  const exited = once(child, 'exit')
  let started = 0
  for await (const line of createInterface({ input: child.stdout })) {
    lines.push(line)
    if (/^partition .*fetching from/.test(line) && ++started === 4) child.kill('SIGTERM')
  }
  const [code] = await exited
  expect(code).toBe(0)
  expect(lines[0]).toBe(`produced 2000 lines to ${args[3]}`)
  expect(lines).toContain('SIGTERM: handing off')
  expect(lines.filter((l) => /: shutdown, \d+ lines applied here, hand-off snapshot \d{10}-\d{12}$/.test(l))).toHaveLength(4)
  expect(lines.at(-1)).toMatch(/^closed: 4 partitions handed off, \d+ lines applied by this process$/)
})
