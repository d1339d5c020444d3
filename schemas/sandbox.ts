import { Type } from '@sinclair/typebox'
import { REQUEST_ID_PATTERN } from './patterns.js'

const SandboxMessage = Type.Object({
  requestId: Type.String(),
  to: Type.String(),
  from: Type.String(),
  subject: Type.String(),
  text: Type.String(),
  html: Type.String(),
  code: Type.String({ description: 'The code the message carries (sandbox only).' }),
  createdAt: Type.String({ format: 'date-time' })
})

export const SandboxQuery = Type.Object({
  email: Type.String({ minLength: 1, maxLength: 1024, description: 'The address the messages were sent to, percent-encoded in the query string (`+` is `%2B`).', examples: ['ada@example.com'] }),
  requestId: Type.Optional(Type.String({ pattern: REQUEST_ID_PATTERN, description: 'Only the message of this dispatch (its requestId): at most one.' }))
}, { additionalProperties: false })

export const SandboxMessagesReply = Type.Object({ success: Type.Literal(true), data: Type.Object({ messages: Type.Array(SandboxMessage) }) }, { $id: 'SandboxMessagesReply', description: 'The sandbox messages to one address, newest first.' })
