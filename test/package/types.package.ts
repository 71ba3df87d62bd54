/**
 * `npm run test:package`: the published declarations compile in an app,
 * without skipLibCheck, under every TypeScript x @types/node pair a user
 * installs today. Each pair gets a fresh app with the packed package, the
 * optional peers (so that tidemark/kafka, tidemark/s3 and tidemark/prometheus
 * resolve) and those two packages, and runs that TypeScript's tsc there.
 *
 * The app's tsconfig lists no "types": TypeScript 5.9 then loads every
 * @types package it finds, TypeScript 7 none, so under 7 each entry point is
 * compiled alone (one program each), where nothing but the package itself
 * can bring in the Node types its declarations use (another entry's imports,
 * kafkajs's say, would otherwise hide a missing one). Then the README's
 * examples (examples/readme/, which readme-examples.test.ts keeps equal to
 * the README's blocks) compile in the same app with the settings the README
 * asks a TypeScript user for ("types": ["node"], module nodenext).
 */
import { execFile } from 'node:child_process'
import { cp, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { devVersion, installApp, root } from '../../scripts/package/pack.js'
import { makeTempDir, type TempDir } from '../helpers/tmp.js'

const run = promisify(execFile)

/** The TypeScript lines and @types/node ranges of the matrix; `latest` is whatever the registry says today. */
const TYPESCRIPT = ['5.9', '7']
const TYPES_NODE = ['20', '22', '24', 'latest']
const ENTRIES = ['tidemark', 'tidemark/kafka', 'tidemark/s3', 'tidemark/prometheus', 'tidemark/testing']
const PEERS = ['kafkajs', '@aws-sdk/client-s3', 'prom-client']

function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number)
  const pb = b.split('.').map(Number)
  for (let i = 0; i < 3; i++) if (pa[i] !== pb[i]) return pa[i]! - pb[i]!
  return 0
}

/** The newest release of `name` in `range`, asked of the registry itself (npm's cache may hold an old `latest`). */
async function newest(name: string, range: string): Promise<string> {
  const { stdout } = await run('npm', ['view', `${name}@${range}`, 'version', '--json', '--prefer-online'], { maxBuffer: 16 << 20 })
  const found = JSON.parse(stdout) as string | string[]
  const versions = (Array.isArray(found) ? found : [found]).filter((v) => /^\d+\.\d+\.\d+$/.test(v)).sort(compareVersions)
  if (versions.length === 0) throw new Error(`npm has no release of ${name}@${range}`)
  return versions.at(-1)!
}

interface Pair {
  typescript: string
  typesNode: string
  /** The pair as the test names it: versions and the ranges they came from. */
  label: string
}

// Resolved while the tests are collected, so that their names say the exact versions.
const pairs: Pair[] = []
{
  const ts = await Promise.all(TYPESCRIPT.map((range) => newest('typescript', range)))
  const node = await Promise.all(TYPES_NODE.map((range) => newest('@types/node', range)))
  for (const [i, typescript] of ts.entries()) {
    for (const [j, typesNode] of node.entries()) {
      pairs.push({ typescript, typesNode, label: `TypeScript ${typescript} (${TYPESCRIPT[i]}), @types/node ${typesNode} (${TYPES_NODE[j]})` })
    }
  }
}

/**
 * The programs compiled in a pair's app: their names and the entry points
 * each one's source imports. One program for a TypeScript that loads every
 * @types package by itself (before 6), one per entry point for one that loads
 * none.
 */
function programs(typescript: string): Array<{ name: string; entries: string[] }> {
  if (Number(typescript.split('.')[0]) < 6) return [{ name: 'all', entries: ENTRIES }]
  return ENTRIES.map((entry) => ({ name: entry.replace('/', '-'), entries: [entry] }))
}

let work: TempDir
const appOf = (p: Pair): string => join(work.path, `ts-${p.typescript}-node-${p.typesNode}`)

beforeAll(async () => {
  work = makeTempDir('tidemark-types-')
  const tarball = inject('tarball')
  const peers = await Promise.all(PEERS.map(async (name) => `${name}@${await devVersion(name)}`))
  // Two installs at a time: most of an install is waiting on the cache and the registry.
  const queue = [...pairs]
  const installer = async (): Promise<void> => {
    for (let p = queue.shift(); p !== undefined; p = queue.shift()) {
      const app = appOf(p)
      await installApp(app, [tarball, ...peers, `typescript@${p.typescript}`, `@types/node@${p.typesNode}`])
      for (const program of programs(p.typescript)) {
        const source = program.entries.map((entry, i) => `import * as entry${i} from '${entry}'\n`).join('') +
          `export const entries = [${program.entries.map((_, i) => `entry${i}`).join(', ')}]\n`
        await writeFile(join(app, `${program.name}.ts`), source)
        await writeFile(join(app, `tsconfig.${program.name}.json`), JSON.stringify({
          compilerOptions: {
            target: 'ES2022', lib: ['ES2023'], module: 'nodenext', moduleResolution: 'nodenext',
            strict: true, skipLibCheck: false, noEmit: true,
          },
          files: [`${program.name}.ts`],
        }, null, 2))
      }
      await cp(join(root, 'examples', 'readme'), join(app, 'readme'), { recursive: true })
      await writeFile(join(app, 'tsconfig.readme.json'), JSON.stringify({
        compilerOptions: {
          target: 'ES2022', lib: ['ES2023'], module: 'nodenext', moduleResolution: 'nodenext', types: ['node'],
          strict: true, noUncheckedIndexedAccess: true, skipLibCheck: false, noEmit: true,
        },
        include: ['readme'],
      }, null, 2))
    }
  }
  await Promise.all([installer(), installer()])
}, 600_000)

afterAll(() => work?.cleanup())

describe('the published declarations compile without skipLibCheck', () => {
  for (const p of pairs) it(p.label, async () => {
    const app = appOf(p)
    const installed = async (name: string): Promise<string> =>
      (JSON.parse(await readFile(join(app, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version
    expect([await installed('typescript'), await installed('@types/node')]).toEqual([p.typescript, p.typesNode])
    const tsc = join(app, 'node_modules', 'typescript', 'bin', 'tsc')
    const compile = (config: string): Promise<{ code: number | undefined; stdout: string }> => run(process.execPath, [tsc, '-p', config], { cwd: app, maxBuffer: 16 << 20 })
      .then(({ stdout }) => ({ code: 0, stdout }), (err: { code?: number; stdout?: string }) => ({ code: err.code, stdout: err.stdout ?? String(err) }))
    for (const program of programs(p.typescript)) {
      expect(await compile(`tsconfig.${program.name}.json`), `tsc on ${program.entries.join(', ')}`).toEqual({ code: 0, stdout: '' })
    }
    expect(await compile('tsconfig.readme.json'), "tsc on the README's examples").toEqual({ code: 0, stdout: '' })
  })
})
