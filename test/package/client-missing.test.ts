import { execFile } from 'node:child_process'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { tempDir } from '../helpers/tmp.js'

const run = promisify(execFile)
const root = join(import.meta.dirname, '..', '..')

/**
 * Runs `args` in a fresh Node process (through tsx) in which the AWS SDK is
 * not installed: a module hook fails its resolution exactly as Node does for
 * a package that is absent (ERR_MODULE_NOT_FOUND); every other module is the
 * real one. npm run test:package checks the same in an app that lacks it.
 */
async function withoutSdk(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const dir = tempDir('tidemark-nosdk-')
  await writeFile(join(dir, 'hooks.mjs'), `
    export async function resolve(specifier, context, next) {
      if (specifier === '@aws-sdk/client-s3') {
        const error = new Error("Cannot find package '@aws-sdk/client-s3' imported from " + context.parentURL)
        error.code = 'ERR_MODULE_NOT_FOUND'
        throw error
      }
      return next(specifier, context)
    }
  `)
  await writeFile(join(dir, 'register.mjs'), `import { register } from 'node:module'\nregister('./hooks.mjs', import.meta.url)\n`)
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', pathToFileURL(join(dir, 'register.mjs')).href, '--import', 'tsx', ...args], { cwd: root })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string }
    return { code: e.code, stdout: e.stdout, stderr: e.stderr }
  }
}

describe('without the optional AWS SDK', () => {
  it("openSnapshotStore('s3://...') fails with TIDEMARK_DFS_CLIENT_MISSING naming what to install; file:// stores work", async () => {
    const dir = tempDir()
    const main = join(dir, 'main.mts')
    await writeFile(main, `
      import { openSnapshotStore } from '${pathToFileURL(join(root, 'src', 'index.ts')).href}'
      const fs = await openSnapshotStore('${pathToFileURL(join(dir, 'snapshots')).href}')
      console.log('file store', fs.capabilities.conditionalPut)
      await openSnapshotStore('s3://bucket/prefix?region=us-east-1').catch((e) => {
        console.log(e.code, e.retriable, e.cause?.code)
        console.log(e.message)
      })
    `)
    const r = await withoutSdk([main])
    expect(r.stderr).toBe('')
    const [fileStore, codes, message] = r.stdout.split('\n')
    expect(fileStore).toBe('file store true')
    expect(codes!.split(' ')).toEqual(['TIDEMARK_DFS_CLIENT_MISSING', 'false', 'ERR_MODULE_NOT_FOUND'])
    expect(message).toBe('s3:// snapshot stores need the AWS SDK, an optional peer dependency of tidemark that is not installed: npm install @aws-sdk/client-s3')
  })

  it('the tidemark command exits 1 with that error on one line', async () => {
    const r = await withoutSdk([join(root, 'src', 'cli', 'main.ts'), 'snapshots', 'list', 's3://bucket/prefix?region=us-east-1', '--job', 'j', '--partition', '0'])
    expect(r.code).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toBe('tidemark: TIDEMARK_DFS_CLIENT_MISSING: s3:// snapshot stores need the AWS SDK, an optional peer dependency of tidemark that is not installed: npm install @aws-sdk/client-s3\n')
  })
})
