import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ERROR_CODES, TidemarkError, type ErrorCode } from '../src/index.js'

const root = join(import.meta.dirname, '..')
const codes = Object.keys(ERROR_CODES) as ErrorCode[]

function docsTable(): Map<string, string> {
  const page = readFileSync(join(root, 'docs', 'errors.md'), 'utf8')
  const table = page.split('<!-- errors:start -->')[1]?.split('<!-- errors:end -->')[0]
  if (table === undefined) throw new Error('docs/errors.md has no <!-- errors:start --> ... <!-- errors:end --> table')
  const rows = new Map<string, string>()
  for (const line of table.split('\n')) {
    const m = /^\| `(TIDEMARK_[A-Z0-9_]+)` \| (yes|no) \|/.exec(line)
    if (m) rows.set(m[1]!, m[2]!)
  }
  return rows
}

function testSources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return testSources(path)
    return /\.(test|suite|group)\.ts$/.test(name) && name !== 'errors.test.ts' ? [readFileSync(path, 'utf8')] : []
  })
}

function suiteSources(dir: string): string[] {
  return readdirSync(dir).filter((name) => name.endsWith('.ts')).map((name) => readFileSync(join(dir, name), 'utf8'))
}

describe('error codes', () => {
  it('every code has the TIDEMARK_ prefix and a summary', () => {
    for (const code of codes) {
      expect(code).toMatch(/^TIDEMARK_[A-Z0-9_]+$/)
      expect(ERROR_CODES[code].summary.length).toBeGreaterThan(10)
    }
  })

  it('the table of docs/errors.md lists exactly the codes, with the same retriable flag', () => {
    const rows = docsTable()
    expect([...rows.keys()].sort()).toEqual([...codes].sort())
    for (const code of codes) expect(rows.get(code)).toBe(ERROR_CODES[code].retriable ? 'yes' : 'no')
  })

  it('every code is reached by at least one test', () => {
    // The conformance suites that tidemark/testing exports are tests too.
    const sources = [...testSources(join(root, 'test')), ...suiteSources(join(root, 'src', 'testing'))].join('\n')
    const unreached = codes.filter((code) => !sources.includes(`'${code}'`))
    expect(unreached).toEqual([])
  })

  it('TidemarkError carries code, retriable, cause and details', () => {
    const cause = new Error('root')
    const err = new TidemarkError('TIDEMARK_COMMIT_FAILED', 'msg', { cause, details: { offset: 1n } })
    expect(err).toBeInstanceOf(Error)
    expect(err).toMatchObject({ name: 'TidemarkError', code: 'TIDEMARK_COMMIT_FAILED', retriable: true, cause, details: { offset: 1n } })
    expect(new TidemarkError('TIDEMARK_COMMIT_FAILED', 'msg', { retriable: false }).retriable).toBe(false)
  })
})
