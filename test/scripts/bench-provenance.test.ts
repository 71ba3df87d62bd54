// scripts/bench-provenance.ts: a figure is stale exactly when a commit after
// the one it was measured at changed the code it measures, in a real git
// repository made for the test.
import { execFileSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { benchFiles, provenance } from '../../scripts/bench-provenance.js'
import { tempDir } from '../helpers/tmp.js'

function repo(): { root: string; write(file: string, text: string): void; commit(message: string): string } {
  const root = tempDir()
  const git = (...args: string[]): string => execFileSync('git', args, { cwd: root, encoding: 'utf8' }).trim()
  git('init', '-q')
  git('config', 'user.email', 'bench@test')
  git('config', 'user.name', 'bench')
  return {
    root,
    write(file, text) {
      mkdirSync(join(root, file, '..'), { recursive: true })
      writeFileSync(join(root, file), text)
    },
    commit(message) {
      git('add', '-A')
      git('commit', '-q', '-m', message)
      return git('rev-parse', 'HEAD')
    },
  }
}

describe('bench provenance', () => {
  it('follows a bench file to the bench/ helpers it imports, and no further', () => {
    const r = repo()
    r.write('bench/x.ts', "import { a } from './_a.js'\nimport { s } from '../src/index.js'\n")
    r.write('bench/_a.ts', "export { b } from './_b.js'\n")
    r.write('bench/_b.ts', 'export const b = 1\n')
    r.write('bench/_unused.ts', 'export const c = 1\n')
    expect(benchFiles(r.root, 'bench/x.ts')).toEqual(['bench/_a.ts', 'bench/_b.ts', 'bench/x.ts'])
  })

  it('is stale after a change to a measured layer or a bench file, not after one elsewhere', () => {
    const r = repo()
    r.write('bench/x.ts', "import { a } from './_a.js'\n")
    r.write('bench/_a.ts', 'export const a = 1\n')
    r.write('src/store/s.ts', 'export const s = 1\n')
    r.write('src/cli/c.ts', 'export const c = 1\n')
    r.write('package-lock.json', '{}\n')
    const measuredAt = r.commit('code')
    r.write('bench/results/x.json', '{}\n')
    r.commit('figures')
    const figures = { bench: 'x', command: 'npm run bench -- x', commit: measuredAt }

    expect(provenance(r.root, 'x', figures, ['src/store'])).toEqual({ commit: measuredAt.slice(0, 7), dirty: false })
    r.write('src/cli/c.ts', 'export const c = 2\n')
    r.commit('elsewhere')
    expect(provenance(r.root, 'x', figures, ['src/store']).staleBy).toBeUndefined()

    r.write('bench/_a.ts', 'export const a = 2\n')
    const helper = r.commit('a bench helper')
    expect(provenance(r.root, 'x', figures, ['src/store']).staleBy).toEqual({ commit: helper.slice(0, 7), file: 'bench/_a.ts' })

    // The oldest commit that moved the code is the one named.
    r.write('src/store/s.ts', 'export const s = 2\n')
    r.commit('store')
    expect(provenance(r.root, 'x', figures, ['src/store']).staleBy?.commit).toBe(helper.slice(0, 7))
  })

  it('falls back to the commit that wrote the figure file, and says when git cannot tell', () => {
    const r = repo()
    r.write('src/store/s.ts', 'export const s = 1\n')
    r.write('bench/results/x.json', '{}\n')
    const saved = r.commit('figures without a commit')
    expect(provenance(r.root, 'x', { command: 'npm run bench -- x' }, ['src/store'])).toEqual({ commit: saved.slice(0, 7), dirty: false })
    r.write('src/store/s.ts', 'export const s = 2\n')
    const change = r.commit('store')
    expect(provenance(r.root, 'x', { command: 'npm run bench -- x' }, ['src/store']).staleBy).toEqual({ commit: change.slice(0, 7), file: 'src/store/s.ts' })

    const unknown = provenance(r.root, 'x', { commit: 'f'.repeat(40), dirty: true }, ['src/store'])
    expect(unknown.dirty).toBe(true)
    expect(unknown.unknown).toMatch(/git could not tell/)
  })
})
