import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { CommandError, parseCommand } from '../../examples/shared-config/commands.js'
import { SharedConfig } from '../../examples/shared-config/shared-config.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { openFileLog } from '../../src/log/index.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { spawnScript, type Child } from '../log/child.js'

describe('SharedConfig commands', () => {
  it('parses every command of the sample, case-insensitively, with comma-separated arguments', () => {
    expect(parseCommand('GET_ALL')).toEqual({ name: 'GET_ALL' })
    expect(parseCommand('  get  a ')).toEqual({ name: 'GET', key: 'a' })
    expect(parseCommand('PUT a, 1')).toEqual({ name: 'PUT', key: 'a', value: '1' })
    expect(parseCommand('PUT greeting, hello world')).toEqual({ name: 'PUT', key: 'greeting', value: 'hello world' })
    expect(parseCommand('put_if_absent a,2')).toEqual({ name: 'PUT_IF_ABSENT', key: 'a', value: '2' })
    expect(parseCommand('REMOVE a')).toEqual({ name: 'REMOVE', key: 'a' })
    expect(parseCommand('REMOVE a, 3')).toEqual({ name: 'REMOVE', key: 'a', currentValue: '3' })
    expect(parseCommand('REPLACE a, 4')).toEqual({ name: 'REPLACE', key: 'a', newValue: '4' })
    expect(parseCommand('REPLACE a, 4, 1')).toEqual({ name: 'REPLACE', key: 'a', newValue: '4', currentValue: '1' })
    for (const name of ['CLEAR', 'REFRESH', 'HELP', 'QUIT']) expect(parseCommand(name.toLowerCase())).toEqual({ name })
    expect(parseCommand('   ')).toBeUndefined()
  })

  it('refuses unknown commands and malformed arguments with one line', () => {
    const message = (line: string): string => {
      try {
        parseCommand(line)
      } catch (err) {
        expect(err).toBeInstanceOf(CommandError)
        return (err as Error).message
      }
      throw new Error(`'${line}' parsed`)
    }
    expect(message('FROB a')).toBe("unknown command 'FROB' (HELP lists the commands)")
    expect(message('PUT a')).toBe("PUT takes key, value, got 'a'")
    expect(message('GET')).toBe('GET takes key, got none')
    expect(message('GET_ALL x')).toBe("GET_ALL takes no arguments, got 'x'")
    expect(message('REPLACE a, 1, 2, 3')).toBe("REPLACE takes key, newValue [, currentValue], got 'a, 1, 2, 3'")
    expect(message('PUT , 1')).toBe("PUT key, value: an argument is empty in ', 1'")
    for (const line of ['FROB a', 'PUT a', 'PUT , 1']) expect(message(line)).not.toContain('\n')
  })

  it('compacts after every 5 removes and after every clear, as the Pravega sample does', async () => {
    const root = tempDir()
    const config = await SharedConfig.open({
      log: await openFileLog(tempDir()),
      compactPoints: { store: new FsSnapshotStore({ root }), prefix: 'cfg/' },
    })
    const points = (): number => readdirSync(join(root, 'cfg'), { withFileTypes: true }).length
    for (let i = 0; i < 6; i++) await config.putProperty(`k${i}`, String(i))
    for (let i = 0; i < 4; i++) expect(await config.removeProperty(`k${i}`)).toBe(String(i))
    expect(() => points()).toThrow(/ENOENT/)
    // A remove that removes nothing does not count.
    expect(await config.removeProperty('k4', 'not its value')).toBeUndefined()
    expect(await config.removeProperty('k4')).toBe('4')
    expect(points()).toBe(1)
    await config.clear()
    expect(points()).toBe(2)
    expect(config.getProperties()).toEqual(new Map())
  })
})

/** Sends a command and returns the line it printed. */
async function command(program: Child, line: string): Promise<string> {
  const from = program.lines.length
  program.send(line)
  return program.waitFor(() => true, from)
}

/**
 * `refreshed` matches the REFRESH lines: revisions are consecutive on the file
 * log, while on Kafka a conflicting write may leave a record that did not take
 * effect, depending on timing.
 */
async function scenario(args: string[], location: string, refreshed: [string, string] | RegExp): Promise<void> {
  const banner = `SharedConfig 'default' on ${location}. HELP lists the commands.`
  const a = spawnScript('examples/shared-config/main.ts', args)
  expect(await a.waitFor(() => true)).toBe(banner)
  // B starts after A has created the state, which B then finds.
  const b = spawnScript('examples/shared-config/main.ts', args)
  expect(await b.waitFor(() => true)).toBe(banner)
  const [first, second] = Array.isArray(refreshed) ? refreshed : [refreshed, refreshed]

  expect(await command(a, 'PUT a, 1')).toBe('a=1 (was not set)')
  expectLine(await command(b, 'REFRESH'), first)
  expect(await command(b, 'GET a')).toBe('a: 1')
  expect(await command(b, 'PUT_IF_ABSENT a, 2')).toBe('a is already 1; unchanged')
  expect(await command(a, 'REPLACE a, 3, 1')).toBe('a=3 (was 1)')
  // B still holds a=1; its write conflicts, and on the fresh state a is 3.
  expect(await command(b, 'REPLACE a, 4, 1')).toBe('a is 3, not 1; unchanged')
  expect(await command(b, 'REMOVE a, 3')).toBe('removed a (was 3)')
  expectLine(await command(a, 'REFRESH'), second)
  expect(await command(a, 'GET_ALL')).toBe('{}')

  expect(await command(a, 'FROB a')).toBe("error: unknown command 'FROB' (HELP lists the commands)")
  expect(await command(a, 'PUT a')).toBe("error: PUT takes key, value, got 'a'")
  expect(await command(a, 'GET a')).toBe('a: not set')
  for (const program of [a, b]) {
    expect(await command(program, 'QUIT')).toBe('bye')
    expect(await program.exited).toEqual({ code: 0, signal: null })
  }
  // Nothing printed beyond the lines checked above.
  expect(a.lines).toHaveLength(9)
  expect(b.lines).toHaveLength(7)
  expect(a.stderr() + b.stderr()).toBe('')
}

function expectLine(line: string, expected: string | RegExp): void {
  if (typeof expected === 'string') expect(line).toBe(expected)
  else expect(line).toMatch(expected)
}

describe('the SharedConfig program', () => {
  it('two programs on one file log agree, line by line, through the scenario of the sample', async () => {
    const dir = tempDir()
    await scenario(['--dir', dir], join(dir, 'log'), ['refreshed (revision 1)', 'refreshed (revision 3)'])
  })

  it('the same scenario on Kafka', async () => {
    const topic = randomName('shared-config')
    await scenario(['--dir', tempDir(), '--kafka', kafkaService().brokers.join(','), '--topic', topic, '--fetch-wait-ms', '5'], `Kafka topic ${topic} partition 0`, /^refreshed \(revision \d+\)$/)
  })
})
