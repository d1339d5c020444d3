import neostandard from 'neostandard'

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
    // schemas/ is the bottom layer: the route, configuration and tenants-file schemas import
    // nothing of the service, so that lib, plugins and routes can all depend on them.
    files: ['schemas/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['../lib/*', '../plugins/*', '../routes/*', '../app.js', '../server.js'], message: 'schemas/ is the bottom layer: it imports nothing from the rest of the service.' }] }]
    }
  },
  {
    // lib/ is the domain: no Fastify, so it can be tested and reused without a server.
    files: ['lib/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['fastify', 'fastify-plugin', '@fastify/*', '!@fastify/error', '../plugins/*', '../../plugins/*', '../routes/*', '../../routes/*', '../cli/*', '../../cli/*'], message: 'lib/ knows nothing of Fastify, plugins, routes or the command-line programs.' }] }]
    }
  },
  {
    // cli/ holds programs over the domain: they run without a server.
    files: ['cli/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['fastify', 'fastify-plugin', '@fastify/*', '!@fastify/error', '../plugins/*', '../routes/*', '../app.js', '../server.js'], message: 'cli/ programs use lib/ and schemas/, not the server.' }] }]
    }
  }
]
