import fp from 'fastify-plugin'
import { parseConfig } from '../lib/config/from-env.js'
import type { Config } from '../lib/config/types.js'

declare module 'fastify' {
  interface FastifyInstance {
    config: Config
  }
}

/** The one place that reads the process environment. */
export function readConfig (): Config {
  return parseConfig(process.env)
}

export default fp<{ config: Config }>(async function configPlugin (fastify, options) {
  fastify.decorate('config', options.config)
}, { name: 'config', fastify: '5.x' })
