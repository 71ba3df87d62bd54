/**
 * `npm run package:size`: packs Tidemark, installs the tarball into two
 * fresh apps, one without and one with the optional peers
 * (@aws-sdk/client-s3, kafkajs, at the versions package.json tests), measures
 * each app's node_modules, prints one JSON line and writes the figures into
 * docs/benchmarks.md between <!-- package-size:start --> and <!-- package-size:end -->.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { devVersion, installApp, pack, root, tarballFiles, treeBytes } from './pack.js'

const work = await mkdtemp(join(tmpdir(), 'tidemark-size-'))
try {
  const tarball = await pack(work)
  const tarballBytes = (await readFile(tarball)).length
  const files = (await tarballFiles(tarball)).length
  const peers = [`@aws-sdk/client-s3@${await devVersion('@aws-sdk/client-s3')}`, `kafkajs@${await devVersion('kafkajs')}`]
  const measure = async (name: string, extra: string[]): Promise<{ bytes: number; packages: number }> => {
    const app = join(work, name)
    await installApp(app, [tarball, ...extra])
    const lock = JSON.parse(await readFile(join(app, 'package-lock.json'), 'utf8')) as { packages: Record<string, unknown> }
    return { bytes: await treeBytes(join(app, 'node_modules')), packages: Object.keys(lock.packages).filter((k) => k !== '').length }
  }
  const alone = await measure('alone', [])
  const withPeers = await measure('with-peers', peers)
  const figures = { node: process.version, date: new Date().toISOString().slice(0, 10), tarballBytes, files, alone, withPeers, peers }
  console.log(JSON.stringify(figures))

  const mb = (n: number): string => `${(n / 1e6).toFixed(1)} MB`
  const block = [
    '<!-- package-size:start -->',
    `Installed size (\`npm run package:size\`, ${figures.date}, Node.js ${figures.node}, Linux x64): the tarball is ${(tarballBytes / 1e3).toFixed(0)} kB (${files} files);`,
    `\`npm install tidemark\` alone puts ${mb(alone.bytes)} in node_modules (${alone.packages} packages),`,
    `with ${peers.map((p) => `\`${p}\``).join(' and ')} ${mb(withPeers.bytes)} (${withPeers.packages} packages).`,
    '<!-- package-size:end -->',
  ].join('\n')
  const docPath = join(root, 'docs', 'benchmarks.md')
  const doc = await readFile(docPath, 'utf8')
  const updated = doc.replace(/<!-- package-size:start -->[\s\S]*?<!-- package-size:end -->/, block)
  if (updated === doc && !doc.includes(block)) throw new Error('docs/benchmarks.md has no <!-- package-size:start --> ... <!-- package-size:end --> markers')
  await writeFile(docPath, updated)
} finally {
  await rm(work, { recursive: true, force: true })
}
