import { defineConfig } from 'vitest/config'
import { packageEntries } from './vitest.alias.js'
import { heavyFiles } from './vitest.heavy.js'

// `npm run test:group`: the consumer-group suite that is too slow for
// `npm test` (stalled members past the session timeout, rebalances with
// several worker processes). Its files end in .group.ts; the slowest files
// of npm test (vitest.heavy.ts) run here too.
export default defineConfig({
  resolve: { alias: packageEntries },
  test: {
    include: ['test/**/heavy/**/*.group.ts', ...heavyFiles],
    globalSetup: ['test/setup/services.ts'],
    setupFiles: ['test/setup/worker.ts'],
    pool: 'forks',
    maxWorkers: 1,
    testTimeout: 600_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    retry: 0,
    env: {
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
    },
  },
})
