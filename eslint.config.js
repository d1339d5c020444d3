import neostandard from 'neostandard'

const REDIS_ONLY_IN_STATE = { name: 'ioredis', message: 'Redis is spoken in lib/state/redis only: use a store of lib/state (createState) or a factory of lib/state/redis.' }
const LIB_IMPORTS = { group: ['fastify', 'fastify-plugin', '@fastify/*', '!@fastify/error', '../plugins/*', '../../plugins/*', '../../../plugins/*', '../routes/*', '../../routes/*', '../../../routes/*', '../cli/*', '../../cli/*', '../../../cli/*'], message: 'lib/ knows nothing of Fastify, plugins, routes or the command-line programs.' }

export default [
  ...neostandard({ ts: true, ignores: ['dist/**', '.bench-build/**', 'coverage/**', '.tap/**', 'node_modules/**', 'clients/typescript/dist/**', 'clients/typescript/src/openapi.d.ts', 'test-artifacts/**'] }),
  {
    rules: {
      // `void promise` marks a promise left running on purpose.
      'no-void': ['error', { allowAsStatement: true }],
      // Header, address and log safety match control characters on purpose.
      'no-control-regex': 'off'
    }
  },
  {
    // Redis is spoken in lib/state/redis only: the one place that owns key names, scripts and
    // their record formats. The tests and the benchmarks set up and inspect a Redis of their
    // own, so they may connect directly.
    files: ['**/*.ts'],
    ignores: ['lib/state/redis/**', 'test/**', 'bench/**'],
    rules: {
      'no-restricted-imports': ['error', { paths: [REDIS_ONLY_IN_STATE] }]
    }
  },
  {
    // schemas/ is the bottom layer: the route, configuration and tenants-file schemas import
    // nothing of the service, so that lib, plugins and routes can all depend on them.
    files: ['schemas/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { paths: [REDIS_ONLY_IN_STATE], patterns: [{ group: ['../lib/*', '../plugins/*', '../routes/*', '../app.js', '../server.js'], message: 'schemas/ is the bottom layer: it imports nothing from the rest of the service.' }] }]
    }
  },
  {
    // lib/ is the domain: no Fastify, so it can be tested and reused without a server.
    files: ['lib/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { paths: [REDIS_ONLY_IN_STATE], patterns: [LIB_IMPORTS] }]
    }
  },
  {
    // The same, in the Redis adapter, which alone may import ioredis.
    files: ['lib/state/redis/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [LIB_IMPORTS] }]
    }
  },
  {
    // cli/ holds programs over the domain: they run without a server.
    files: ['cli/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { paths: [REDIS_ONLY_IN_STATE], patterns: [{ group: ['fastify', 'fastify-plugin', '@fastify/*', '!@fastify/error', '../plugins/*', '../routes/*', '../app.js', '../server.js'], message: 'cli/ programs use lib/ and schemas/, not the server.' }] }]
    }
  },
  {
    // The sandbox is written `test` on the wire only: the code asks isSandbox(mode) or names
    // SANDBOX_MODE (lib/keys/api-keys.ts), so that the word means one thing (docs/architecture.md#glossary).
    files: ['lib/**/*.ts', 'plugins/**/*.ts', 'routes/**/*.ts', 'cli/**/*.ts', 'app.ts', 'server.ts'],
    ignores: ['lib/keys/api-keys.ts'],
    rules: {
      'no-restricted-syntax': ['error', { selector: "Literal[value='test']", message: 'The sandbox mode is SANDBOX_MODE, asked with isSandbox(mode) (lib/keys/api-keys.ts).' }]
    }
  }
]
