/**
 * Packs Tidemark as `npm publish` would and installs the tarball into fresh
 * apps, for test/package/pack.package.ts and scripts/package/size.ts.
 *
 * The package is built into a staging copy (package.json, README.md,
 * LICENSE, docs/ and a fresh dist/), never into the checkout's dist/, so a
 * stale file there cannot slip into the tarball and nothing the other tools
 * use is touched.
 */
import { execFile } from 'node:child_process'
import { cp, lstat, mkdir, readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)
export const root = join(import.meta.dirname, '..', '..')

/** The versions a user's app adds, as in the acceptance test: the compiler and Node's types the project itself builds with. */
export async function devVersion(name: string): Promise<string> {
  const pkg = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }
  const version = pkg.devDependencies[name]
  if (version === undefined) throw new Error(`package.json has no devDependency ${name}`)
  return version
}

/** Builds and packs into `work`; returns the tarball's path. */
export async function pack(work: string): Promise<string> {
  const staging = join(work, 'staging')
  await mkdir(staging, { recursive: true })
  for (const name of ['package.json', 'README.md', 'LICENSE', 'docs']) await cp(join(root, name), join(staging, name), { recursive: true })
  await run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.build.json'), '--outDir', join(staging, 'dist')], { cwd: root, maxBuffer: 16 << 20 })
  const { stdout } = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], { cwd: staging, maxBuffer: 16 << 20 })
  const [info] = JSON.parse(stdout) as Array<{ filename: string }>
  return join(work, info!.filename)
}

/** Lists the files of a tarball made by pack(), without the leading `package/`. */
export async function tarballFiles(tarball: string): Promise<string[]> {
  const { stdout } = await run('tar', ['tzf', tarball], { maxBuffer: 16 << 20 })
  return stdout.split('\n').filter((l) => l !== '' && !l.endsWith('/')).map((l) => l.replace(/^package\//, '')).sort()
}

/**
 * A fresh app in `dir` made as the README tells a new user: `npm init -y`
 * (npm 11 writes `"type": "commonjs"`), then the README's one step for its
 * examples, `npm pkg set type=module`; then the given packages installed,
 * from npm's cache when it holds them (--prefer-offline). `dir`'s name
 * becomes the package's: lower case, no spaces.
 */
export async function installApp(dir: string, specs: string[]): Promise<void> {
  await mkdir(dir, { recursive: true })
  await run('npm', ['init', '-y'], { cwd: dir })
  await run('npm', ['pkg', 'set', 'type=module'], { cwd: dir })
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', ...specs], { cwd: dir, maxBuffer: 16 << 20 })
}

/** Bytes of every file under `dir` (apparent sizes; symbolic links counted as links). */
export async function treeBytes(dir: string): Promise<number> {
  let total = 0
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) total += await treeBytes(path)
    else total += (await lstat(path)).size
  }
  return total
}
