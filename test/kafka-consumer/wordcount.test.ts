import { join } from 'node:path'
import { expect, it } from 'vitest'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { member } from './fixtures/wordcount-member.js'

it('examples/wordcount: one command, progress lines while it works, and SIGTERM hands every partition off with a snapshot before it exits 0, saying how many lines the partitions hold', async () => {
  const dir = tempDir()
  const job = randomName('wc')
  const args = ['--brokers', kafkaService().brokers.join(','), '--topic', randomName('wc-lines'), '--job', job, '--state', join(dir, 'state'), '--store', `file://${join(dir, 'snapshots')}`, '--produce', '2000', '--progress-ms', '50']
  const m = member(args)
  await m.line(/^partition .*fetching from/, 4)
  // The progress lines, each with what a partition applied since the one before, until all 2000 lines are.
  let applied = 0
  for (let n = 1; applied < 2000; n++) {
    const line = await m.line(/^applied: /, n)
    expect(line).toMatch(new RegExp(`^applied: ${args[3]}/\\d \\+\\d+ \\(at offset \\d+\\)(, ${args[3]}/\\d \\+\\d+ \\(at offset \\d+\\))*$`))
    for (const delta of line.matchAll(/ \+(\d+) /g)) applied += Number(delta[1])
  }
  expect(applied).toBe(2000)
  m.child.kill('SIGTERM')
  expect(await m.exited).toBe(0)
  const { lines } = m
  expect(lines[0]).toBe(`produced 2000 lines to ${args[3]}`)
  // The member's id, known once it joined, and the pid a `kill` must name.
  expect(lines[1]).toMatch(new RegExp(`^member (?!undefined)\\S+ of group tidemark-${job} \\(pid ${m.child.pid}\\): partitions ${args[3]}/0, ${args[3]}/1, ${args[3]}/2, ${args[3]}/3$`))
  expect(lines).toContain('SIGTERM: handing off')
  expect(lines.filter((l) => /: shutdown, \d+ lines applied here, hand-off snapshot \d{10}-\d{12}$/.test(l))).toHaveLength(4)
  expect(lines.at(-2)).toMatch(new RegExp(`^positions: ${args[3]}/0 \\d+, ${args[3]}/1 \\d+, ${args[3]}/2 \\d+, ${args[3]}/3 \\d+: these partitions hold 2000 lines$`))
  expect(lines.at(-1)).toBe('closed: 4 partitions handed off, 2000 lines applied by this process')
})

it('examples/wordcount: --brokers without --store is a usage error, not a fixed store that earlier runs filled', async () => {
  const m = member(['--brokers', kafkaService().brokers.join(',')], 'pipe')
  let stderr = ''
  m.child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString('utf8') })
  expect(await m.exited).toBe(2)
  expect(stderr).toMatch(/^wordcount: --store is required with --brokers/)
  expect(m.lines).toEqual([])
})
